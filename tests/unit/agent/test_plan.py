"""The agent's plan: which durable operations a node runs to match the map (pure)."""

from __future__ import annotations

from typing import Any

from nodeos.agent.plan import plan
from nodeos.cluster.map import ClusterMap, encode_command

GiB = 1 << 30


def state(*cmds: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    m = ClusterMap()
    base = [
        ("add_node", {"node_id": 1, "name": "s1"}),
        ("add_node", {"node_id": 2, "name": "s2"}),
        (
            "pool_create",
            {"node_id": 1, "name": "p", "pool_id": "pool1", "drives": ["d"], "devices": ["/dev/a"]},
        ),
        (
            "pool_create",
            {"node_id": 2, "name": "p", "pool_id": "pool2", "drives": ["d"], "devices": ["/dev/b"]},
        ),
        ("node_report", {"node_id": 1, "seq": 1, "pools": {"pool1": {"state": "ready", "size_bytes": GiB}}}),
        ("node_report", {"node_id": 2, "seq": 1, "pools": {"pool2": {"state": "ready", "size_bytes": GiB}}}),
    ]
    for i, (c, a) in enumerate([*base, *cmds], start=1):
        out = m.apply(i, encode_command(c, a))
        assert "error" not in out, (c, out)
    return m.state


POOL1 = {"p": {"name": "p", "pool_id": "pool1", "state": "ready", "drives": ["d"], "devices": ["/dev/a"]}}


def vol_cmd(name: str = "v", nodes: tuple[int, ...] = (1,)) -> tuple[str, dict[str, Any]]:
    return (
        "volume_create",
        {
            "uuid": f"u-{name}",
            "name": name,
            "nqn": f"nqn.x:{name}",
            "size_bytes": GiB,
            "placement": [{"node": n, "pool_id": f"pool{n}"} for n in nodes],
        },
    )


def test_a_new_pool_is_created_on_its_node_only() -> None:
    st = state(
        ("pool_create", {"node_id": 1, "name": "q", "pool_id": "qq", "drives": ["e"], "devices": ["/dev/e"]})
    )
    steps = plan(st, 1, POOL1, {}, {})
    assert [(s.op, s.name, s.record["pool_id"]) for s in steps] == [("pool.create", "q", "qq")]
    assert plan(st, 2, {"p": dict(POOL1["p"], pool_id="pool2")}, {}, {}) == []


def test_a_volume_is_created_with_the_maps_ids_on_every_replica_node() -> None:
    st = state(vol_cmd("v", (1, 2)))
    for me, pool in ((1, "pool1"), (2, "pool2")):
        pools = {"p": dict(POOL1["p"], pool_id=pool)}
        (step,) = plan(st, me, pools, {}, {})
        assert step.op == "volume.create" and step.record["uuid"] == "u-v" and step.record["pool_id"] == pool
        assert step.record["nqn"] == "nqn.x:v" and step.record["state"] == "creating"


def test_a_created_volume_plans_nothing_more() -> None:
    """The create's record is what the next pass compares with: no re-export right after (CI of
    2026-11-27: a daemon stopped in that window ran it at its next start)."""
    host = "nqn.2014-08.com.example:h"
    for granted in ((), (host,)):
        cmds = [("host_add", {"nqn": host, "dhchap_secret": "DHHC-1:00:x:"}), vol_cmd()]
        cmds += [("volume_hosts", {"name": "v", "host": h, "add": True}) for h in granted]
        st = state(*cmds)
        (step,) = plan(st, 1, POOL1, {}, {})
        assert step.op == "volume.create"
        assert plan(st, 1, POOL1, {"v": dict(step.record, state="ready")}, {}) == []


def test_nothing_is_created_before_the_pool_is_there_or_when_it_failed_last_time() -> None:
    st = state(vol_cmd())
    assert plan(st, 1, {}, {}, {}) == []
    assert plan(st, 1, POOL1, {}, {}, skip={"volume:v"}) == []


def test_volumes_the_map_dropped_or_replaced_are_deleted_first() -> None:
    st = state(vol_cmd("w"))
    old = {"name": "v", "uuid": "u-old", "pool_id": "pool1", "state": "ready", "size_bytes": GiB, "hosts": []}
    same_name_new_uuid = dict(old, name="w")
    steps = plan(st, 1, POOL1, {"v": old, "w": same_name_new_uuid}, {})
    assert [(s.op, s.name) for s in steps] == [("volume.delete", "v"), ("volume.delete", "w")]


def test_grants_and_growth_are_applied_to_a_ready_replica() -> None:
    host = "nqn.2014-08.com.example:h"
    st = state(
        vol_cmd(),
        (
            "node_report",
            {
                "node_id": 1,
                "seq": 2,
                "pools": {"pool1": {"state": "ready"}},
                "replicas": {"u-v": {"state": "in-sync"}},
            },
        ),
        ("host_add", {"nqn": host, "dhchap_secret": "DHHC-1:00:x:"}),
        ("volume_hosts", {"name": "v", "host": host, "add": True}),
    )
    have = {"name": "v", "uuid": "u-v", "pool_id": "pool1", "state": "ready", "size_bytes": GiB, "hosts": []}
    (step,) = plan(st, 1, POOL1, {"v": have}, {})
    assert step.op == "volume.grant" and step.record["hosts"] == [host] and step.record["secrets"] == [True]
    assert "DHHC" not in repr(step.record)  # the secret itself never lands in local records
    st["volumes"]["u-v"]["size_bytes"] = 2 * GiB
    (step,) = plan(st, 1, POOL1, {"v": dict(have, hosts=[host], secrets=[True])}, {})
    assert step.op == "volume.resize" and step.data["size_bytes"] == 2 * GiB


def test_a_pool_is_deleted_only_once_nothing_of_ours_lives_in_it() -> None:
    st = state()
    st["pools"]["1/p"]["state"] = "deleting"
    vol = {"name": "v", "uuid": "u-v", "pool_id": "pool1", "state": "ready", "size_bytes": GiB}
    steps = plan(st, 1, POOL1, {"v": vol}, {})
    assert [s.op for s in steps] == ["volume.delete"]
    assert [s.op for s in plan(st, 1, POOL1, {}, {})] == ["pool.delete"]


def _mirror_state(phase_reports: int) -> dict[str, Any]:
    """v on s1 (primary) and s2, ready; snapshot snap of it; `phase_reports` 1: the primary
    reported the writes frozen."""
    members = {"members": {2: "in-sync"}}
    cmds: list[tuple[str, dict[str, Any]]] = [
        vol_cmd("v", (1, 2)),
        ("node_report", {"node_id": 1, "seq": 2, "replicas": {"u-v": {"state": "in-sync", **members}}}),
        ("node_report", {"node_id": 2, "seq": 2, "replicas": {"u-v": {"state": "in-sync"}}}),
        ("snapshot_create", {"uuid": "s-1", "name": "snap", "volume": "v"}),
    ]
    if phase_reports:
        rep = {"state": "in-sync", "frozen": "s-1", **members}
        cmds.append(("node_report", {"node_id": 1, "seq": 3, "replicas": {"u-v": rep}}))
    return state(*cmds)


def test_a_replica_snapshot_is_taken_only_once_the_primary_holds_the_writes() -> None:
    local = {"v": {"name": "v", "uuid": "u-v", "vol_id": "vuv", "pool": "p", "pool_id": "pool2",
                   "state": "ready", "size_bytes": GiB, "hosts": [], "secrets": []}}  # fmt: skip
    pool2 = {"p": dict(POOL1["p"], pool_id="pool2")}
    st = _mirror_state(0)
    assert st["snapshots"]["s-1"]["phase"] == "freezing"
    assert [s.op for s in plan(st, 2, pool2, local, {})] == []
    st = _mirror_state(1)
    steps = plan(st, 2, pool2, local, {})
    assert [(s.op, s.name, s.data["vol_id"]) for s in steps] == [("volume.snapshot", "snap", "vuv")]
