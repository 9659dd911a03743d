"""Capacity at apply (nodeos/storage/capacity.py): a create the leader decided against a map
that another create changed meanwhile is checked again when applied, in log order, and refused
on every node alike when its pool no longer has room; thin pools may still overcommit."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.control import decide
from nodeos.storage.placement import PlacementRefused
from tests.unit.storage.test_storage_map import GiB, M


def one_node(free: int, size: int = 100 * GiB) -> M:
    m = M()
    m.ok("add_node", node_id=1, name="s1", addresses={"peer": "10.0.0.1:7000"})
    m.ok("pool_create", node_id=1, name="fast", pool_id="pool1", drives=["d1"], devices=["/dev/x"])
    report(m, free, size)
    return m


def report(m: M, free: int, size: int = 100 * GiB, replicas: dict[str, Any] | None = None) -> None:
    pools = {"pool1": {"state": "ready", "size_bytes": size, "free_bytes": free}}
    m.report(1, pools=pools, replicas=replicas or {})


def decision(m: M, name: str, size: int) -> tuple[str, dict[str, Any]]:
    return decide.volume_create(m.st, {"name": name, "size": size}, f"u-{name}")


def test_two_creates_decided_on_one_map_the_second_refused_at_apply_naming_pool_and_node() -> None:
    m = one_node(free=3 * GiB)
    first, second = decision(m, "a", 2 * GiB), decision(m, "b", 2 * GiB)  # both fit the map they saw
    assert first[1]["placement"] == second[1]["placement"] == [{"node": 1, "pool_id": "pool1"}]
    assert "error" not in m.do(first[0], **first[1])
    out = m.do(second[0], **second[1])
    err = out["error"]
    assert err["code"] == "placement_refused" and err["field"] == "size"
    assert "volume 'b'" in err["message"] and "pool 'fast' on node s1" in err["message"]
    assert "1 GiB usable" in err["message"] and "2 GiB of it promised" in err["message"]
    # Nothing of it was applied: the name is free, the first volume alone is there.
    assert "b" not in m.st["names"] and [v["name"] for v in m.st["volumes"].values()] == ["a"]


def test_the_leader_counts_what_it_placed_before_the_node_reports_it() -> None:
    m = one_node(free=3 * GiB)
    cmd, args = decision(m, "a", 2 * GiB)
    m.ok(cmd, **args)
    # Decided after the first was applied, before the node's next report: refused up front.
    with pytest.raises(PlacementRefused, match="needs 1 node with ≥ 2 GiB free; none has"):
        decision(m, "b", 2 * GiB)
    assert decision(m, "c", 1 * GiB)[1]["placement"] == [{"node": 1, "pool_id": "pool1"}]


def test_thin_pools_overcommit_once_the_node_has_reported_its_volumes() -> None:
    m = one_node(free=3 * GiB)
    cmd, args = decision(m, "a", 2 * GiB)
    m.ok(cmd, **args)
    # The node made the thin volume: the pool's free space is what is unwritten, still 3 GiB.
    report(m, 3 * GiB, replicas={"u-a": {"state": "in-sync"}})
    cmd, args = decision(m, "b", 2 * GiB)
    m.ok(cmd, **args)
    assert {v["name"] for v in m.st["volumes"].values()} == {"a", "b"}
    # ... but never a volume larger than what is free, nor than the pool.
    report(m, 3 * GiB, size=3 * GiB, replicas={"u-a": {"state": "in-sync"}, "u-b": {"state": "in-sync"}})
    big = {"uuid": "u-c", "name": "c", "nqn": "n", "size_bytes": 4 * GiB}
    out = m.do("volume_create", placement=[{"node": 1, "pool_id": "pool1"}], **big)
    assert out["error"]["code"] == "placement_refused" and "pool size 3 GiB" in out["error"]["message"]


def test_a_deleted_volume_the_node_no_longer_reports_holds_no_room() -> None:
    m = one_node(free=3 * GiB)
    cmd, args = decision(m, "a", 2 * GiB)
    m.ok(cmd, **args)
    m.ok("volume_delete", name="a")  # never reported: dropped at once
    cmd, args = decision(m, "b", 2 * GiB)
    m.ok(cmd, **args)
    assert [v["name"] for v in m.st["volumes"].values()] == ["b"]


def test_replicated_create_refused_when_one_of_its_pools_filled_meanwhile() -> None:
    m = M()
    for nid in (1, 2):
        m.ok("add_node", node_id=nid, name=f"s{nid}", addresses={"peer": f"10.0.0.{nid}:7000"})
        m.ok("pool_create", node_id=nid, name="p", pool_id=f"pool{nid}", drives=["d1"], devices=["/dev/x"])
        pools = {f"pool{nid}": {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 10 * GiB}}
        m.report(nid, pools=pools)
    cmd, args = decide.volume_create(m.st, {"name": "v", "size": 4 * GiB, "replicas": 2}, "u-v")
    # Node 2's pool filled up (written data) before the create was applied.
    m.report(2, pools={"pool2": {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 1 * GiB}})
    out = m.do(cmd, **args)
    assert out["error"]["code"] == "placement_refused" and "pool 'p' on node s2" in out["error"]["message"]
    assert m.st["volumes"] == {}
