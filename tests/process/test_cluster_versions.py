"""Mixed versions (issue 27): an N node and an N+1 node serve together as real nodeosd processes.

The "older" node is this tree run with NODEOS_TEST_KNOWN_LEVEL=1 (test tooling,
nodeos/cluster/feature_member.py): it knows only the map commands of feature level 1, as
release 0.1.0 does. While it is a member the cluster's level stays 1 and a level-2 command
(`kv_delete`) is refused before it reaches the Raft log; once it is "upgraded" (restarted without
the override) the level rises and the command commits, and an older node is refused at join.
Run "older" again, it meets the entries
it does not know and stops there (never skips them), then resumes when upgraded.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.feature_member import TEST_KNOWN_LEVEL_ENV
from nodeos.cluster.features import LEVEL
from nodeos.cluster.localcluster import LocalNode
from tests.process.cluster_cli import NODEOS, cli, ok

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def status(node: LocalNode) -> dict[str, Any]:
    return ok(cli(node, "status"))


def wait_for(
    node: LocalNode, pred: Callable[[dict[str, Any]], bool], timeout: float = 60.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = cli(node, "status")
        if r.returncode == 0:
            st = json.loads(r.stdout)
            if pred(st):
                return st
        time.sleep(0.2)
    raise AssertionError(f"condition not reached on node {node.index}; last status {st}\n{node.log_tail()}")


def settled(node: LocalNode, *args: str) -> Any:
    """An idempotent write asked again when its outcome is unknown: a two-member cluster whose
    other member restarts loses its quorum for a moment and its leader steps down (the answer is
    then `unknown_outcome`); asked again once there is a leader, it is the same write."""
    for _ in range(5):
        r = cli(node, *args)
        if r.returncode == 0 or "unknown_outcome" not in r.stdout + r.stderr:
            return ok(r)
        wait_for(node, lambda s: s.get("leader") is not None)
    return ok(r)


def member(st: dict[str, Any], nid: int) -> dict[str, Any]:
    return next(m for m in st["members"] if m["node_id"] == nid)


def node_health(node: LocalNode) -> dict[str, Any]:
    r = subprocess.run([NODEOS, "--socket", node.socket, "status", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["health"]


@pytest.fixture
def made(tmp_path: Path) -> Any:
    nodes: list[LocalNode] = []
    yield tmp_path, nodes
    for n in nodes:
        n.kill()


def test_a_command_the_older_node_does_not_know_never_commits_while_it_is_a_member(made: Any) -> None:
    root, nodes = made
    new, old = LocalNode(root, 1), LocalNode(root, 2)
    old.env[TEST_KNOWN_LEVEL_ENV] = "1"
    nodes += [new, old]
    new.start()
    old.start()
    # Started at level 1 (a new cluster starts at its first member's level, this release's): the
    # cluster an older release may still join.
    init = ok(cli(new, "init", "--node-id", "1", "--feature-level", "1"))
    ok(cli(old, "join", new.address, "--token", init["token"], "--node-id", "2"))
    st = wait_for(new, lambda s: len(s["members"]) == 2 and s["leader"] == 1)
    assert member(st, 2)["knows_level"] == 1 and member(st, 1)["knows_level"] == LEVEL
    assert st["features"]["feature_level"] == 1
    settled(new, "kv", "put", "k", "v")

    # The level stays at the older node's: raising it is refused naming the member.
    r = cli(new, "set", "feature-level", "2")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "node 2" in r.stdout + r.stderr and "knows level 1" in r.stdout + r.stderr
    # The new command is refused before Raft, asked of either node: had it reached the log the
    # older node would have stopped at it (leases and reports append entries meanwhile, so the
    # log's length says nothing here).
    for n in (new, old):
        r = cli(n, "kv", "delete", "k")
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "needs cluster feature level 2" in r.stdout + r.stderr
    st = status(new)
    assert st["features"]["feature_level"] == 1
    assert ok(cli(old, "kv", "get", "k"))["value"] == "v"
    assert status(old)["features"]["stalled"] is None

    # "Upgraded": restarted without the override, it tells the cluster; the level can rise.
    old.kill()
    del old.env[TEST_KNOWN_LEVEL_ENV]
    old.start()
    wait_for(new, lambda s: member(s, 2)["knows_level"] == LEVEL)
    raised = settled(new, "set", "feature-level", "2")
    assert raised["feature_level"] == 2
    # Now a node whose release knows less is refused at join, naming the level.
    late = LocalNode(root, 3)
    late.env[TEST_KNOWN_LEVEL_ENV] = "1"
    nodes.append(late)
    late.start()
    r = cli(late, "join", new.address, "--token", init["token"], "--node-id", "3")
    assert r.returncode == 2 and "feature level 2" in r.stdout, (r.stdout, r.stderr)
    assert [m["node_id"] for m in status(new)["members"]] == [1, 2]
    settled(old, "kv", "delete", "k")  # asked again after an unknown outcome it deletes nothing
    assert ok(cli(old, "kv", "get", "k"))["value"] is None
    st = wait_for(old, lambda s: s["features"]["feature_level"] == 2)
    assert st["features"]["stalled"] is None

    # Run older again: it meets what it does not know and stops there, never skipping it.
    old.kill()
    old.env[TEST_KNOWN_LEVEL_ENV] = "1"
    old.start()
    st = wait_for(old, lambda s: s["features"]["stalled"] is not None)
    stalled = st["features"]["stalled"]["message"]
    assert "needs release >= 0.2.0" in stalled, stalled
    assert "stopped" in node_health(old)["failures"]["cluster"]
    human = subprocess.run(
        [NODEOS, "--socket", old.socket, "cluster", "status"], capture_output=True, text=True, timeout=60
    )
    assert human.returncode == 0 and "STOPPED: needs release >= 0.2.0" in human.stdout, human.stdout
    assert "knows level 1" in human.stdout  # what this node's release knows
    settled(new, "kv", "put", "after", "1")  # the cluster goes on; the stopped node applies nothing
    assert status(old)["applied"] < status(new)["applied"]
    # Upgraded again: it resumes from the entry where it stopped and catches up.
    old.kill()
    del old.env[TEST_KNOWN_LEVEL_ENV]
    old.start()
    st = wait_for(old, lambda s: s["features"]["stalled"] is None and s["features"]["feature_level"] == 2)
    assert node_health(old)["ok"] is True
    assert ok(cli(old, "kv", "get", "after"))["value"] == "1"
