"""The REST endpoint on a 3-node loopback cluster: a token made on one member is honoured by
every member and revoked everywhere at once; a read-only token changes nothing through any of
them (the map compared before and after); schemathesis over a follower's routes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.localcluster import LocalCluster, LocalNode, free_port

from .test_rest_api import https
from .test_rest_fuzz import rest_config, run_schemathesis

pytestmark = pytest.mark.process
Cluster = tuple[LocalCluster, dict[int, Path]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("restcluster")
    c = LocalCluster(root, 3)
    cas: dict[int, Path] = {}
    for n in c.nodes:
        n.rest_port = free_port()  # type: ignore[attr-defined]
        conf_dir = root / f"conf{n.index}"
        conf_dir.mkdir()
        config, cas[n.index] = rest_config(conf_dir, n.rest_port)  # type: ignore[attr-defined]
        n.args = ["--config", str(config)]
    try:
        c.form()
        yield c, cas
    finally:
        for n in c.nodes:
            n.kill()


def call(c: Cluster, n: LocalNode, verb: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    return https(n.rest_port, c[1][n.index], verb, path, token, body)  # type: ignore[attr-defined]


def until(fn: Any, want: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got == want or time.monotonic() >= deadline:
            return got
        time.sleep(0.1)


def test_a_token_works_on_every_member_and_its_revocation_everywhere(cluster: Any) -> None:
    c, _ = cluster
    n1, n2, n3 = c.nodes
    admin = n1.call("auth.token.create", {"role": "admin"})
    token = admin["token"]
    for n in (n1, n2, n3):
        assert until(lambda n=n: call(cluster, n, "GET", "/status", token)[0], 200) == 200
    status, body = call(cluster, n3, "POST", "/cluster/kv/put", token, {"key": "rest", "value": "n3"})
    assert status == 200 and body["value"] == "n3"
    assert n1.call("cluster.kv.get", {"key": "rest"})["value"] == "n3"
    n2.call("auth.token.revoke", {"token_id": admin["token_id"]})
    for n in (n1, n2, n3):
        assert until(lambda n=n: call(cluster, n, "GET", "/status", token)[0], 401) == 401


def test_a_read_only_token_changes_nothing_through_any_member(cluster: Any) -> None:
    c, _ = cluster
    ro = c.nodes[1].call("auth.token.create", {"role": "read-only"})["token"]
    before = c.nodes[0].call("cluster.kv.get", {"key": "ro"})["value"]
    writes = [
        ("/cluster/kv/put", {"key": "ro", "value": "x"}),
        ("/host/add", {"nqn": "nqn.2014-08.com.example:ro"}),
        ("/node/label", {"node": "n1", "set": {"rack": "x"}}),
        ("/auth/token/create", {"role": "admin"}),
    ]
    for n in c.nodes:
        assert until(lambda n=n: call(cluster, n, "GET", "/volume/list", ro)[0], 200) == 200
        for path, body in writes:
            status, reply = call(cluster, n, "POST", path, ro, body)
            assert status == 403 and reply["error"]["field"] == "authorization", (path, reply)
            status, reply = call(cluster, n, "POST", path, "nodeos_0000000000000000_" + "x" * 43, body)
            assert status == 401, (path, reply)
    assert c.nodes[2].call("cluster.kv.get", {"key": "ro"})["value"] == before
    assert c.nodes[2].call("host.list") == []
    assert "rack" not in (c.nodes[0].call("node.show", {"node": "n1"})["labels"] or {})


@pytest.mark.skipif(
    os.environ.get("NODEOS_REST_FUZZ_CLUSTER") != "1",
    reason="schemathesis through a 3-node cluster: NODEOS_REST_FUZZ_CLUSTER=1 (its writes go through "
    "Raft: 30 s idle, ten minutes beside a lab run)",
)
def test_schemathesis_through_a_follower(cluster: Any, tmp_path: Path) -> None:
    c, cas = cluster
    leader = c.leader()
    follower = next(n for n in c.nodes if n is not leader)
    token = follower.call("auth.token.create", {"role": "admin"})["token"]
    url = f"https://127.0.0.1:{follower.rest_port}/api/v1/openapi.json"  # type: ignore[attr-defined]
    run_schemathesis(url, cas[follower.index], token, tmp_path)
    for n in c.nodes:
        assert token.split("_", 2)[2] not in (n.root / "nodeosd.log").read_text()


# What moves on its own in an idle cluster (leases, elections, replication progress, counters):
# left out of the map's view below.
MOVES = {"lease", "health", "leader", "stuck_calls", "match", "lag", "why", "role", "term", "commit",
         "applied", "last_index", "transport", "raft_loop_running"}  # fmt: skip
VIEW = ("volume.list", "pool.list", "host.list", "node.list", "drive.list", "auth.token.list",
        "cluster.token.list", "cluster.upgrade.status", "cluster.status")  # fmt: skip
KEYS = ("tok-kept", "tok-new")


def _still(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _still(v) for k, v in x.items() if k not in MOVES}
    return [_still(v) for v in x] if isinstance(x, list) else x


def map_view(c: LocalCluster) -> dict[int, Any]:
    """Every member's reads of the map (volumes, pools, hosts, nodes and their labels, REST tokens,
    keys, membership and voters, the CA's and secret's rolls) and of its own state (drives, join
    tokens), less what moves on its own."""
    view = {}
    for n in c.nodes:
        reads = {r: _still(n.call(r)) for r in VIEW}
        reads["kv"] = {k: n.call("cluster.kv.get", {"key": k})["value"] for k in KEYS}
        view[n.index] = reads
    return view


def _bodies(ro_id: str, join_id: str) -> dict[str, Any]:
    """A body an admin's request would have acted on, for the writes where one is harmless here;
    the others get `{}` (for `/cluster/leave` and the upgrade's steps that is a whole request)."""
    host = "nqn.2014-08.com.example:tok"
    return {
        "/auth/token/create": {"role": "admin"},
        "/auth/token/revoke": {"token_id": ro_id},
        "/cluster/kv/put": {"key": "tok-new", "value": "x"},
        "/cluster/kv/cas": {"key": "tok-kept", "value": "y", "expect": "kept"},
        "/cluster/kv/delete": {"key": "tok-kept"},
        "/cluster/set": {"voter_down_s": 77},
        "/cluster/token/revoke": {"token_id": join_id},
        "/cluster/remove": {"node_id": 3},
        "/host/add": {"nqn": host},
        "/host/remove": {"nqn": host},
        "/node/drain": {"node": "n2"},
        "/node/label": {"node": "n1", "set": {"rack": "x"}},
        "/node/rebuild_limit": {"node": "n1", "mbps": 10},
        "/volume/create": {"name": "tok", "size": "1GiB"},
    }


def test_every_write_refuses_missing_wrong_and_read_only_tokens_and_changes_nothing(cluster: Any) -> None:
    """Every route the OpenAPI document marks admin, on every member, with no token, a wrong one
    and a read-only one: 401, 401, 403 (before the body is read), and nothing changed: the map
    and each member's own state compared before and after (map_view), and not one entry
    committed anywhere (an unchanged last index on every member; an idle cluster commits nothing
    on its own)."""
    c, _ = cluster
    made = c.nodes[0].call("auth.token.create", {"role": "read-only"})
    ro = made["token"]
    join_id = c.nodes[0].call("cluster.token", {})["token_id"]  # the CA's holder issues them
    c.nodes[0].call("cluster.kv.put", {"key": "tok-kept", "value": "kept"})
    status, doc = call(cluster, c.nodes[0], "GET", "/openapi.json", ro)
    assert status == 200
    writes = sorted(p for p, item in doc["paths"].items() if item["post"]["x-nodeos-role"] == "admin")
    assert {"/volume/create", "/cluster/kv/put", "/auth/token/create", "/cluster/leave"} <= set(writes)
    bodies = _bodies(made["token_id"], join_id)
    assert set(bodies) <= set(writes)
    for n in c.nodes:
        assert until(lambda n=n: call(cluster, n, "GET", "/status", ro)[0], 200) == 200
    time.sleep(1.0)  # the token's own commit applied everywhere
    before = {n.index: n.call("cluster.status")["last_index"] for n in c.nodes}
    view = map_view(c)
    assert view[1]["kv"]["tok-kept"] == "kept" and made["token_id"] in str(view[1]["auth.token.list"])
    wrong = "nodeos_0000000000000000_" + "x" * 43
    for n in c.nodes:
        for path in writes:
            for token, want in ((None, 401), (wrong, 401), (ro, 403)):
                status, reply = call(cluster, n, "POST", path, token, bodies.get(path, {}))
                assert status == want and reply["error"]["code"] in ("unauthorized", "forbidden"), (
                    n.index, path, token == ro, status, reply,
                )  # fmt: skip
    time.sleep(1.0)
    assert map_view(c) == view
    assert {n.index: n.call("cluster.status")["last_index"] for n in c.nodes} == before
