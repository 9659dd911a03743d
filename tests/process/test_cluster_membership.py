"""Forming, joining and leaving a cluster of real nodeosd processes through the `nodeos` CLI,
and the bad inputs an operator can give: each gets a clear error and changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.localcluster import LocalNode, free_port
from nodeos.errors import BadInput
from tests.process.cluster_cli import started_nodes

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

NODEOS = str(Path(sys.executable).parent / "nodeos")


def cli(node: LocalNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODEOS, "--socket", node.socket, "cluster", *args], capture_output=True, text=True, timeout=120
    )


def cli_json(node: LocalNode, *args: str) -> Any:
    r = cli(node, *args, "--json")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout)


def wait_status(node: LocalNode, pred: Any, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = cli_json(node, "status")
        if pred(st):
            return st
        time.sleep(0.1)
    raise AssertionError(f"condition not reached; last status {st}")


def voters(st: dict[str, Any]) -> list[int]:
    return sorted(m["node_id"] for m in st["members"] if m["raft"] == "voter")


@pytest.fixture
def nodes(tmp_path: Path) -> Any:
    yield from started_nodes(tmp_path)


def test_form_join_status_kv_leave(nodes: Any) -> None:
    n1, n2, n3 = nodes(1), nodes(2), nodes(3)
    init = cli_json(n1, "init", "--node-id", "1", "--failure-domain", "rack-a")
    token = init["token"]
    assert init["node_id"] == 1 and init["address"] == n1.address
    for n in (n2, n3):
        out = cli_json(n, "join", n1.address, "--token", token, "--node-id", str(n.raft_id))
        assert out["cluster_id"] == init["cluster_id"]
    st = wait_status(n3, lambda s: voters(s) == [1, 2, 3] and s["leader"] is not None)
    assert st["cluster_id"] == init["cluster_id"] and st["raft_loop_running"] is True
    assert {m["node_id"]: m["failure_domain"] for m in st["members"]}[1] == "rack-a"
    assert all(m["role"] == "witness" for m in st["members"])  # --dataplane none
    # The leader reports every peer's match index and lag.
    leader = {1: n1, 2: n2, 3: n3}[st["leader"]]
    # `nodeos status` of each daemon names it with the id `cluster status` uses for the leader.
    for n in (n1, n2, n3):
        node_status = subprocess.run(
            [NODEOS, "--socket", n.socket, "status", "--json"], capture_output=True, text=True, timeout=60
        )
        assert node_status.returncode == 0, node_status.stderr
        assert json.loads(node_status.stdout)["node_id"] == n.raft_id
    lst = wait_status(leader, lambda s: all(m["lag"] == 0 for m in s["members"]))
    assert all(m["match"] >= 1 for m in lst["members"])
    human = cli(n2, "status")
    assert human.returncode == 0 and "leader" in human.stdout and n3.address in human.stdout

    # kv through any node, linearizable
    assert cli_json(n2, "kv", "put", "color", "blue")["value"] == "blue"
    assert cli_json(n3, "kv", "get", "color")["value"] == "blue"
    assert cli_json(n1, "kv", "cas", "color", "green", "--expect", "blue")["succeeded"] is True
    miss = cli(n3, "kv", "cas", "color", "red", "--expect", "blue")
    assert miss.returncode == 1 and "green" in miss.stderr
    assert cli_json(n2, "kv", "get", "color")["value"] == "green"
    assert cli_json(n2, "kv", "get", "nothing")["value"] is None

    # a follower leaves; it can come back with the same id
    follower = next(n for n in (n1, n2, n3) if n.raft_id != st["leader"])
    out = cli_json(follower, "leave")
    assert out["node_id"] == follower.raft_id
    # a node that left is a cluster of one again (its own, new cluster)
    alone = cli_json(follower, "status")
    assert alone["solo"] is True and len(alone["members"]) == 1
    assert alone["cluster_id"] != st["cluster_id"]
    rest = next(n for n in (n1, n2, n3) if n is not follower)
    wait_status(rest, lambda s: follower.raft_id not in [m["node_id"] for m in s["members"]])
    cli_json(follower, "join", rest.address, "--token", token, "--node-id", str(follower.raft_id))
    wait_status(rest, lambda s: voters(s) == [1, 2, 3])

    # the leader leaves: leadership moves, the others keep serving
    st = wait_status(n1, lambda s: s["leader"] is not None)
    leader = {1: n1, 2: n2, 3: n3}[st["leader"]]
    cli_json(leader, "leave")
    other = next(n for n in (n1, n2, n3) if n is not leader)
    st = wait_status(other, lambda s: s["leader"] not in (None, leader.raft_id) and len(voters(s)) == 2)
    assert leader.raft_id not in [m["node_id"] for m in st["members"]]
    assert cli_json(other, "kv", "get", "color")["value"] == "green"


def test_bad_joins_are_refused_and_change_nothing(nodes: Any) -> None:
    n1, n2, n4 = nodes(1), nodes(2), nodes(4)
    token = cli_json(n1, "init", "--node-id", "1")["token"]
    cli_json(n2, "join", n1.address, "--token", token, "--node-id", "2")
    before = wait_status(n1, lambda s: voters(s) == [1, 2])
    n4_before = cli_json(n4, "status")
    assert n4_before["solo"] is True  # a lone node is a cluster of one

    # a node id that is already taken
    r = cli(n4, "join", n1.address, "--token", token, "--node-id", "2")
    assert r.returncode == 2 and "already taken" in r.stderr and "node_id" in r.stderr

    # a token that is not a token
    r = cli(n4, "join", n1.address, "--token", "not-a-token")
    assert r.returncode == 2 and "token" in r.stderr

    # a malformed address
    r = cli(n4, "join", "nowhere", "--token", token)
    assert r.returncode == 2 and "address" in r.stderr

    # nothing listens at the address: no cluster there
    r = cli(n4, "join", f"127.0.0.1:{free_port()}", "--token", token, "--node-id", "4")
    assert r.returncode == 1 and "cannot reach" in r.stderr

    # the address belongs to another cluster than the token's
    n5 = nodes(5)
    other_token = cli_json(n5, "init", "--node-id", "5")["token"]
    r = cli(n4, "join", n1.address, "--token", other_token, "--node-id", "4")
    assert r.returncode == 2 and "not a member of the token's cluster" in r.stderr

    # a value the map cannot hold is refused before it reaches the log
    with pytest.raises(BadInput) as exc:
        n2.call("cluster.kv.put", {"key": "k", "value": [1, 2]})
    assert exc.value.field == "value"

    # nothing changed anywhere
    n4_after = cli_json(n4, "status")
    assert n4_after["solo"] is True and n4_after["cluster_id"] == n4_before["cluster_id"]
    after = cli_json(n1, "status")
    assert [m["node_id"] for m in after["members"]] == [m["node_id"] for m in before["members"]]
    assert after["rejected_commands"] == 0, after["rejected"]

    # init on a member; a cluster of one cannot be left, and its map is its own
    r = cli(n1, "init")
    assert r.returncode == 2 and "already belongs" in r.stderr
    r = cli(n4, "leave")
    assert r.returncode == 2 and "last member" in r.stderr
    assert cli_json(n4, "kv", "get", "color")["value"] is None
    # a single-member cluster cannot lose its last member
    r = cli(n5, "leave")
    assert r.returncode == 2 and "last member" in r.stderr
    r = cli(n1, "kv", "cas", "k", "v")
    assert r.returncode == 2 and "expect" in r.stderr

    # the refused node can still join properly afterwards
    cli_json(n4, "join", n1.address, "--token", token, "--node-id", "4")
    wait_status(n1, lambda s: voters(s) == [1, 2, 4])


def test_a_node_killed_right_after_joining_catches_up_after_restart(nodes: Any) -> None:
    n1, n2 = nodes(1), nodes(2)
    token = cli_json(n1, "init", "--node-id", "1")["token"]
    cli_json(n1, "kv", "put", "early", "yes")
    cli_json(n2, "join", n1.address, "--token", token, "--node-id", "2")
    n2.kill()  # before it had time to catch up: it knows its peers only from the join reply
    n2.start()
    wait_status(n2, lambda s: s["applied"] > 0 and [m["node_id"] for m in s["members"]] == [1, 2])
    assert cli_json(n2, "kv", "get", "early")["value"] == "yes"


def test_membership_and_data_survive_a_full_restart(nodes: Any) -> None:
    ns = [nodes(i) for i in (1, 2, 3)]
    token = cli_json(ns[0], "init", "--node-id", "1")["token"]
    for n in ns[1:]:
        cli_json(n, "join", ns[0].address, "--token", token, "--node-id", str(n.raft_id))
    wait_status(ns[0], lambda s: voters(s) == [1, 2, 3])
    for i in range(20):
        cli_json(ns[i % 3], "kv", "put", f"k{i}", str(i))
    for n in ns:
        n.kill()  # SIGKILL: no clean shutdown
    for n in ns:
        n.start()
    st = wait_status(ns[2], lambda s: s["leader"] is not None and voters(s) == [1, 2, 3])
    assert st["member"] is True
    assert [cli_json(ns[1], "kv", "get", f"k{i}")["value"] for i in range(20)] == [str(i) for i in range(20)]
