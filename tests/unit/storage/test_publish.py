"""Published volumes (issue 13): where the copies go, who copies from whom (a tree, each
filled replica a source, none feeding more than its share), when a replica joins the path
set (its sha256 equals the one recorded from the source), and the map's commands: publish,
grant, unpublish (refused while hosts are connected unless forced)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.control import decide, views
from nodeos.control.publish_api import published_view
from nodeos.errors import BadInput, NotFound, NotSupported, OperationFailed
from nodeos.storage.publish import copy_plan, parse_replicas
from nodeos_devtools.sim.invariants import Violation
from nodeos_devtools.sim.mapcheck import check_state
from tests.unit.storage.test_snapshot_map import in_sync
from tests.unit.storage.test_storage_map import GiB, M, cluster, create

SHA = "ab" * 32


def snapshot_on_three_of(n: int = 5, labels: dict[int, str] | None = None) -> M:
    """n nodes; a 3-replica volume v on s1-s3 (primary s1) with a ready snapshot `snap`."""
    m = cluster(n)
    for nid, rack in (labels or {}).items():
        m.ok("node_label", node_id=nid, set={"rack": rack})
    create(m, "v", 1, 2, 3)
    in_sync(m, (1, 2, 3))
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-1")
    in_sync(m, (1, 2, 3), frozen="s-1", snaps={x: {"s-1": {"state": "ready"}} for x in (1, 2, 3)})
    assert m.st["snapshots"]["s-1"]["state"] == "ready"
    return m


def publish(m: M, replicas: int | None = None, spread: str = "node", name: str = "model") -> dict[str, Any]:
    cmd, args = decide.WRITES["volume.publish"](
        m.st, {"snapshot": "snap", "name": name, "replicas": replicas, "spread": spread}, f"u-{name}"
    )
    assert cmd == "volume_publish"
    m.ok(cmd, **args)
    check_state(m.st)
    return m.st["published"][f"u-{name}"]


def copy(m: M, nid: int, state: str, sha: str | None = None, **extra: Any) -> None:
    """Node nid reports its copy of `model` (and keeps its pool in the report)."""
    pools = {f"pool{nid}": {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 99 * GiB}}
    rep = {"state": state, "sha256": sha, **extra}
    m.report(nid, pools=pools, published={"u-model": rep})
    check_state(m.st)  # the simulator's map invariants hold at every step


# --- replicas: N or all ----------------------------------------------------------------------


def test_replicas_is_a_count_or_all_and_anything_else_is_refused_naming_the_field() -> None:
    assert parse_replicas("all") is None and parse_replicas(None) is None
    assert parse_replicas("3") == 3 and parse_replicas(2) == 2
    for bad in ("0", "-1", "three", 0, 65, True, 2.5):
        with pytest.raises(BadInput) as err:
            parse_replicas(bad)
        assert err.value.field == "replicas"


# --- placement ---------------------------------------------------------------------------------


def test_publish_goes_to_every_node_the_snapshots_own_first_its_primary_the_source() -> None:
    m = snapshot_on_three_of(5)
    pub = publish(m)
    assert [(s["node"], s["seed"]) for s in pub["placement"]] == [
        (1, True),
        (2, True),
        (3, True),
        (4, False),
        (5, False),
    ]
    assert pub["source"] == 1 and pub["state"] == "publishing" and pub["checksum"] is None
    assert m.st["names"]["model"] == {"kind": "published", "uuid": "u-model"}
    assert m.st["paths"]["u-model"] == {}  # nothing is exported before a copy is verified


def test_publish_to_fewer_nodes_or_spread_by_rack_and_too_many_refused() -> None:
    m = snapshot_on_three_of(5)
    assert [s["node"] for s in publish(m, replicas=2)["placement"]] == [1, 2]
    with pytest.raises(BadInput) as err:
        publish(m, replicas=6, name="big")
    assert err.value.field == "replicas" and "5 have" in str(err.value)

    racks = snapshot_on_three_of(5, labels={1: "a", 2: "a", 3: "b", 4: "b", 5: "c"})
    slots = publish(racks, spread="rack")["placement"]
    assert [s["node"] for s in slots] == [1, 3, 5]  # one per rack, the snapshot's nodes first


def test_publish_of_a_missing_or_unready_snapshot_or_a_taken_name_is_refused() -> None:
    m = snapshot_on_three_of(4)
    with pytest.raises(NotFound) as nf:
        decide.WRITES["volume.publish"](m.st, {"snapshot": "nope", "name": "x", "spread": "node"}, "u-x")
    assert nf.value.field == "snapshot"
    with pytest.raises(Exception) as taken:
        decide.WRITES["volume.publish"](m.st, {"snapshot": "snap", "name": "v", "spread": "node"}, "u-x")
    assert taken.value.field == "name"  # type: ignore[attr-defined]
    m.ok("node_set_state", node_id=1, state="draining")  # the source must be able to serve
    with pytest.raises(OperationFailed) as err:
        publish(m)
    assert err.value.field == "snapshot" and "s1" in str(err.value)


# --- copies and joining --------------------------------------------------------------------------


def test_a_replica_joins_only_once_its_checksum_matches_the_sources() -> None:
    m = snapshot_on_three_of(5)
    pub = publish(m)
    copy(m, 2, "ready", SHA)  # a seed done before the source recorded anything: not joined yet
    assert m.st["paths"]["u-model"] == {}
    copy(m, 1, "ready", SHA)  # the source: its checksum becomes the volume's
    assert pub["checksum"] == SHA
    assert m.st["paths"]["u-model"] == {1: "optimized", 2: "optimized"}  # s2's held report too
    # s4 and s5 copy from joined replicas, each source feeding at most its share.
    assert pub["copy_from"] == {4: 1, 5: 2}
    copy(m, 4, "copying", None, progress=0.5)
    copy(m, 4, "ready", "cd" * 32)  # a copy whose bytes differ never serves
    assert 4 not in m.st["paths"]["u-model"] and pub["copy_from"][4] == 1
    assert [e["kind"] for e in m.st["events"]["log"]].count("publish_checksum_mismatch") == 1
    copy(m, 3, "ready", SHA)
    copy(m, 4, "ready", SHA)
    assert pub["state"] == "publishing"
    copy(m, 5, "ready", SHA)
    assert pub["state"] == "ready" and pub["copy_from"] == {}
    # Every path optimized: no primary, any replica serves any read.
    assert m.st["paths"]["u-model"] == {n: "optimized" for n in (1, 2, 3, 4, 5)}


def test_a_copy_whose_source_goes_down_is_fed_by_another_joined_replica() -> None:
    m = snapshot_on_three_of(5)
    pub = publish(m, replicas=4)  # s1, s2, s3 (seeds), s4
    copy(m, 1, "ready", SHA)
    assert pub["copy_from"] == {4: 1}
    copy(m, 2, "ready", SHA)
    m.ok("node_health", node_id=1, health="down", reason="test")
    assert pub["copy_from"] == {4: 2}


def test_a_replica_whose_node_is_down_stops_serving_and_serves_again_once_back_and_verified() -> None:
    m = snapshot_on_three_of(3)
    publish(m)
    for nid in (1, 2, 3):
        copy(m, nid, "ready", SHA)
    m.ok("node_health", node_id=3, health="down", reason="test")
    check_state(m.st)
    assert m.st["paths"]["u-model"] == {1: "optimized", 2: "optimized"}  # its held report is stale
    shown = published_view(m.st, m.st["published"]["u-model"])  # `nodeos volume show model`
    assert shown["health"] == "2/3" and [r["joined"] for r in shown["replicas"]] == [True, True, False]
    m.ok("node_health", node_id=3, health="up", reason="test")
    copy(m, 3, "verifying", None, progress=0.2)  # the restarted daemon reads its copy again
    assert 3 not in m.st["paths"]["u-model"]
    copy(m, 3, "ready", SHA)
    assert m.st["paths"]["u-model"] == {n: "optimized" for n in (1, 2, 3)}


def test_copy_plan_is_a_tree_each_filled_replica_a_source_none_over_its_share() -> None:
    for fanout, rounds_max in ((1, 4), (2, 3)):  # 16 nodes from one seed: 1+1, 2, 4, 8 / x3
        order = list(range(1, 17))
        joined: set[int] = {1}
        current: dict[int, int] = {}
        rounds = 0
        while len(joined) < 16:
            plan = copy_plan(order, {1}, current, joined, set(order), fanout)
            assert plan, "no progress"
            assert all(src in joined for src in plan.values())  # only whole copies feed others
            loads = [list(plan.values()).count(s) for s in set(plan.values())]
            assert max(loads) <= fanout
            joined |= set(plan)  # this round's copies finish
            current = {}
            rounds += 1
        assert rounds <= rounds_max, (fanout, rounds)


def test_copy_plan_keeps_assignments_in_force_and_never_uses_a_down_or_unfilled_source() -> None:
    order = [1, 2, 3, 4]
    plan = copy_plan(order, {1}, {3: 2}, {1, 2}, {1, 2, 3, 4}, fanout=1)
    assert plan == {3: 2, 4: 1}
    assert copy_plan(order, {1}, {3: 2}, {1, 2}, {1, 3, 4}, fanout=1) == {3: 1}  # s2 down
    assert copy_plan(order, {1}, {}, set(), {1, 2, 3, 4}) == {}  # the source not verified yet
    with pytest.raises(BadInput):
        copy_plan(order, {1}, {}, {1}, {1}, fanout=0)


# --- grants, delete, unpublish -------------------------------------------------------------------


def test_grants_and_unpublish_refused_while_hosts_are_connected_unless_forced() -> None:
    m = snapshot_on_three_of(3)
    pub = publish(m)
    m.ok("host_add", nqn="nqn.h1")
    cmd, args = decide.volume_hosts(m.st, {"name": "model", "host": "nqn.h1"}, True)
    m.ok(cmd, **args)
    assert pub["hosts"] == ["nqn.h1"]
    assert views.host_rows(m.st)[0]["volumes"] == ["model"]  # `nodeos host list`
    assert m.do("host_remove", nqn="nqn.h1")["error"]["field"] == "host"  # granted: stays
    with pytest.raises(BadInput) as err:
        decide.volume_delete(m.st, {"name": "model"})
    assert err.value.field == "name" and "unpublish" in str(err.value)

    copy(m, 1, "ready", SHA, connected=["nqn.h1"])
    with pytest.raises(OperationFailed) as busy:
        decide.WRITES["volume.unpublish"](m.st, {"name": "model"})
    assert busy.value.field == "name" and "nqn.h1" in str(busy.value)
    assert "error" in m.do("volume_unpublish", name="model")  # refused at apply too
    cmd, args = decide.WRITES["volume.unpublish"](m.st, {"name": "model", "force": True})
    m.ok(cmd, **args)
    assert pub["state"] == "unpublishing" and m.st["paths"]["u-model"] == {}
    for n in (1, 2, 3):  # gone once no node reports it
        m.report(n, published={})
    assert "model" not in m.st["names"] and "u-model" not in m.st["published"]


def test_where_the_target_cannot_show_connections_a_granted_host_counts_as_connected() -> None:
    m = snapshot_on_three_of(3)
    publish(m)
    m.ok("host_add", nqn="nqn.h1")
    cmd, args = decide.volume_hosts(m.st, {"name": "model", "host": "nqn.h1"}, True)
    m.ok(cmd, **args)
    copy(m, 1, "ready", SHA, connected=None)  # nvmet without debugfs (Debian's kernel)
    with pytest.raises(OperationFailed) as busy:
        decide.WRITES["volume.unpublish"](m.st, {"name": "model"})
    assert "nqn.h1" in str(busy.value) and "revoke" in str(busy.value)
    cmd, args = decide.volume_hosts(m.st, {"name": "model", "host": "nqn.h1"}, False)
    m.ok(cmd, **args)
    cmd, args = decide.WRITES["volume.unpublish"](m.st, {"name": "model"})  # no host granted: free to go
    m.ok(cmd, **args)


def test_published_volumes_survive_a_map_snapshot_and_an_old_snapshot_reads_empty() -> None:
    m = snapshot_on_three_of(3)
    publish(m)
    from nodeos.cluster.map import ClusterMap

    again = ClusterMap()
    again.restore(m.m.snapshot())
    assert again.state["published"] == m.st["published"]
    st = dict(m.st)
    del st["published"]
    import msgpack

    old = ClusterMap()
    old.restore(msgpack.packb(st, use_bin_type=True))
    assert old.state["published"] == {}


def test_publish_is_refused_on_a_data_plane_other_than_the_kernel_one_naming_it() -> None:
    m = snapshot_on_three_of(3)
    seq = m.st["reports"][2]["seq"] + 1
    m.ok("node_report", node_id=2, seq=seq, dataplane={"name": "spdk"}, snapshots={"s-1": {"state": "ready"}})
    with pytest.raises(NotSupported) as err:
        publish(m)
    assert err.value.field == "dataplane" and "s2 runs spdk" in str(err.value)


def test_the_simulators_map_check_catches_a_path_to_a_copy_that_does_not_hold_the_bytes() -> None:
    m = snapshot_on_three_of(4)
    pub = publish(m)
    copy(m, 1, "ready", SHA)
    m.st["paths"]["u-model"][4] = "optimized"  # a bug would export s4 before its copy is verified
    with pytest.raises(Violation, match="paths"):
        check_state(m.st)
    del m.st["paths"]["u-model"][4]
    pub["copy_from"] = {2: 1}  # a seed never copies
    with pytest.raises(Violation, match="copies from"):
        check_state(m.st)
