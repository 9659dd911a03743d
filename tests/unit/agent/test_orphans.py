"""The garbage rule for leftovers a node forgot (pure, nodeos/agent/orphans.py): a drive pulled
under a replica, the replica re-placed on another node, the drive back with the old LV on it.
What may go, and every case where nothing may go: a name outside nodeos' scheme, a local
record, a map entry placing it here or mid-operation, a node not in good standing or with a
stale map, and a leftover seen orphaned too briefly."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.agent import orphans
from nodeos.agent.orphans import Found, Standing
from nodeos.dataplane import mirror_names as names
from tests.unit.agent.test_failover_plan import pools, ready, report
from tests.unit.node.test_replicas import UUID, three_node_map

HEX = UUID.replace("-", "")
LV = ("pool3", "v" + HEX, "volume")  # node 3's old replica, back with its drive
GOOD = Standing(lease_valid=True, grant_health="up", grant_index=10, applied_index=12, pending_intents=0)
OTHER = "0c9d2e4f-1a2b-4c3d-8e9f-a0b1c2d3e4f5"


def settled() -> dict[str, Any]:
    """Node 3's replica re-placed on node 4 and copied: the map is done with node 3 there."""
    st = three_node_map()
    vol = st["volumes"][UUID]
    vol["state"] = "ready"
    st["nodes"][4] = {"name": "s4", "role": "storage", "state": "active"}
    st["pools"]["4/p"] = {"name": "p", "node": 4, "pool_id": "pool4", "state": "ready", "drives": ["d"]}
    vol["placement"][2] = {"node": 4, "pool_id": "pool4"}
    vol["in_sync"] = [2, 1, 4]
    report(st, 2, state="in-sync", epoch=1, members={1: "in-sync", 4: "in-sync"})
    return st


def recs(me: int = 3, vols: dict[str, Any] | None = None, snaps: dict[str, Any] | None = None) -> tuple:
    return (pools(me), vols or {}, snaps or {})


def keys(st: dict[str, Any], found: Found, me: int = 3, r: tuple | None = None) -> list[str]:
    got, _ = orphans.find(st, me, r or recs(me), found)
    return [u.key for u in got]


def why(st: dict[str, Any], found: Found, me: int = 3, r: tuple | None = None) -> dict[str, str]:
    return orphans.find(st, me, r or recs(me), found)[1]


def test_the_old_replica_back_with_its_drive_is_an_orphan_with_its_exports_md_and_remotes() -> None:
    st = settled()
    found = Found(
        lvs=(LV,),
        exports=(names.volume_nqn(UUID), names.replica_nqn(UUID, "3")),
        mirrors=(names.mirror_id_for(UUID),),
        remotes=(names.replica_nqn(UUID, "1"),),
    )
    (u,) = orphans.find(st, 3, recs(), found)[0]
    assert u.kind == "volume" and u.uuid == UUID
    assert u.lvs == (("pool3", "v" + HEX),)
    assert set(u.exports) == {names.volume_nqn(UUID), names.replica_nqn(UUID, "3")}
    assert u.mirror == names.mirror_id_for(UUID) and u.remotes == (names.replica_nqn(UUID, "1"),)
    # A volume the map dropped altogether leaves an orphan too.
    del st["volumes"][UUID]
    assert keys(st, found) == [f"volume:{HEX[:24]}"]
    # An md array alone (named by 24 hex only) is one too.
    assert keys(st, Found(mirrors=(names.mirror_id_for(OTHER),))) == [f"volume:{OTHER.replace('-', '')[:24]}"]


def test_an_orphan_is_removed_only_after_the_grace_period_over_several_scans() -> None:
    st = settled()
    found, _ = orphans.find(st, 3, recs(), Found(lvs=(LV,)))
    t = orphans.Tracker()
    assert t.advance(found, 0.0, 12) == []
    assert t.advance(found, orphans.GRACE_S + 1, 12) == []  # long enough, but only 2 scans
    assert t.advance(found, orphans.GRACE_S + 2, 13) == found  # the third scan
    t = orphans.Tracker()
    for now in (0.0, 1.0, 2.0, 3.0):
        assert t.advance(found, now, 12) == []  # many scans, too short
    # One scan where it is not an orphan (or a closed gate) starts the count again.
    t.advance([], 30.0, 12)
    assert t.advance(found, orphans.GRACE_S + 10, 12) == []
    t.closed()
    assert t.advance(found, 2 * orphans.GRACE_S, 12) == []
    assert t.seen[found[0].key].since == 2 * orphans.GRACE_S


def test_never_anything_outside_the_naming_scheme() -> None:
    st = settled()
    other_hex = OTHER.replace("-", "")
    found = Found(
        lvs=(
            ("pool3", "legacy1", "volume"),  # an imported volume's own id
            ("pool3", "V" + other_hex, "volume"),  # upper case
            ("pool3", "v" + other_hex[:31], "volume"),  # short
            ("pool3", "s" + other_hex, "volume"),  # a snapshot's name with a volume's kind
            ("pool3", "v" + other_hex, "snapshot"),
            ("pool9", "v" + other_hex, "volume"),  # a pool this node has no record of
            ("tpool", "v" + other_hex, "volume"),
        ),
        exports=(
            "nqn.2014-08.org.example:vol:" + OTHER,
            names.VOLUME_NQN_PREFIX + "not-a-uuid",
            names.VOLUME_NQN_PREFIX + OTHER.upper(),
            names.replica_nqn(OTHER, "2"),  # another node's replica name: not made here
            "nqn.2014-08.io.nodeos:node:" + "c" * 32 + ":3",
        ),
        mirrors=("md0", "nodeos-" + other_hex[:23], "nodeos-view-" + other_hex[:24], "nodeos-" + other_hex),
        remotes=("nqn.2014-08.org.example:rep:" + OTHER + ":1", names.REPLICA_NQN_PREFIX + OTHER + ":x"),
    )
    assert keys(st, found) == []
    # The same names in the scheme are orphans (the check above is not vacuous).
    ok = Found(lvs=(("pool3", "v" + other_hex, "clone"), ("pool3", "s" + other_hex, "snapshot")))
    assert keys(st, ok) == [f"snapshot:{OTHER}", f"volume:{other_hex[:24]}"]
    # A pool whose record is not ready (being made or deleted) is not looked into.
    p = pools(3)
    p["p"]["state"] = "creating"
    assert keys(st, ok, r=(p, {}, {})) == []


def test_never_what_this_node_has_a_record_of_in_any_state() -> None:
    st = settled()
    found = Found(lvs=(LV,), exports=(names.volume_nqn(UUID),))
    for state in ("ready", "deleting", "creating", "standby", "demoting"):
        vols = {"v": dict(ready(three_node_map(), 3)["v"], state=state)}
        assert keys(st, found, r=recs(vols=vols)) == []
        assert why(st, found, r=recs(vols=vols)) == {f"volume:{HEX[:24]}": "recorded on this node"}
    snap = Found(lvs=(("pool3", "s" + OTHER.replace("-", ""), "snapshot"),))
    assert keys(st, snap, r=recs(snaps={"s": {"uuid": OTHER, "state": "deleting"}})) == []


def test_never_a_published_volume_nor_what_another_kind_of_local_record_names() -> None:
    st = settled()
    hexo = OTHER.replace("-", "")
    found = Found(lvs=(("pool3", "v" + hexo, "clone"),), exports=(names.volume_nqn(OTHER),))
    assert keys(st, found) == [f"volume:{hexo[:24]}"]
    st["published"] = {
        OTHER: {"uuid": OTHER, "state": "ready", "placement": [{"node": 1, "pool_id": "pool1"}]}
    }
    assert why(st, found) == {f"volume:{hexo[:24]}": "a published volume's"}
    del st["published"]
    got, kept = orphans.find(st, 3, recs(), found, recorded=frozenset({OTHER}))
    assert got == [] and kept == {f"volume:{hexo[:24]}": "recorded on this node"}


def test_never_what_the_map_places_on_this_node() -> None:
    st = settled()
    # Node 1 holds a replica by the map but (say) lost its record: its LV is never an orphan.
    found = Found(lvs=(("pool1", "v" + HEX, "volume"),))
    assert keys(st, found, me=1, r=recs(1)) == []
    assert why(st, found, me=1, r=recs(1))[f"volume:{HEX[:24]}"] == "placed on this node"
    # Placed back on node 3 (re-placed there again): kept whatever else the map says.
    st["volumes"][UUID]["placement"][2] = {"node": 3, "pool_id": "pool3"}
    assert keys(st, Found(lvs=(LV,))) == []


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda st, v: v.update(state="deleting"), "the volume is deleting"),
        (lambda st, v: v.update(state="creating"), "the volume is creating"),
        (lambda st, v: v.update(state="failed"), "the volume is failed"),
        (lambda st, v: v.update(handoff={"to": 1}), "a handoff or a snapshot freeze is in progress"),
        (lambda st, v: v.update(freeze="snap"), "a handoff or a snapshot freeze is in progress"),
        (lambda st, v: v.update(in_sync=[2, 1]), "a replica is being copied"),
        (lambda st, v: st["nodes"][2].update(health="down"), "its primary is down"),
        (lambda st, v: v.update(epoch=2), "its primary has not reported at the volume's epoch"),
        (
            lambda st, v: report(st, 2, state="degraded", epoch=1, members={1: "in-sync", 3: "in-sync"}),
            "its primary's mirror still lists this node's leg",
        ),
    ],
)
def test_never_anything_of_a_volume_whose_map_entry_is_mid_operation(change: Any, reason: str) -> None:
    st = settled()
    found = Found(lvs=(LV,), exports=(names.replica_nqn(UUID, "3"),))
    assert keys(st, found) == [f"volume:{HEX[:24]}"]
    change(st, st["volumes"][UUID])
    assert keys(st, found) == []
    assert why(st, found) == {f"volume:{HEX[:24]}": reason}


def test_a_snapshot_leftover_follows_its_map_entry_and_its_volume() -> None:
    st = settled()
    hexs = OTHER.replace("-", "")
    found = Found(lvs=(("pool3", "s" + hexs, "snapshot"),))
    assert keys(st, found) == [f"snapshot:{OTHER}"]  # no such snapshot in the map
    snap = {"uuid": OTHER, "volume": UUID, "state": "ready", "placement": [{"node": 3, "pool_id": "pool3"}]}
    st["snapshots"][OTHER] = snap
    assert why(st, found) == {f"snapshot:{OTHER}": "placed on this node"}
    snap["placement"] = [{"node": 4, "pool_id": "pool4"}]
    assert keys(st, found) == [f"snapshot:{OTHER}"]
    snap["state"] = "creating"
    assert keys(st, found) == []
    snap["state"] = "ready"
    st["volumes"][UUID]["in_sync"] = [2, 1]  # its volume is being copied
    assert keys(st, found) == []


@pytest.mark.parametrize(
    "change, standing, reason",
    [
        (lambda st: st["nodes"].pop(3), GOOD, "this node is not a member of the map"),
        (lambda st: st["nodes"][3].update(health="down"), GOOD, "the map calls this node down"),
        (lambda st: st["nodes"][3].update(state="leaving"), GOOD, "this node is leaving"),
        (None, Standing(False, "up", 10, 12, 0), "no valid lease (the map may be stale)"),
        (None, Standing(True, "down", 10, 12, 0), "the last lease grant called this node down"),
        (
            None,
            Standing(True, "up", 13, 12, 0),
            "the map here is behind the leader's at the last lease grant",
        ),
        (None, Standing(True, "up", 10, 12, 1), "1 operation(s) pending recovery"),
    ],
)
def test_never_anything_while_the_node_is_not_in_good_standing_or_its_map_is_stale(
    change: Any, standing: Standing, reason: str
) -> None:
    st = settled()
    assert orphans.gate(st, 3, GOOD) is None
    st["nodes"][3]["state"] = "draining"
    assert orphans.gate(st, 3, GOOD) is None  # a draining node still collects
    st["nodes"][3]["state"] = "active"
    if change is not None:
        change(st)
    assert orphans.gate(st, 3, standing) == reason


def test_a_pool_delete_waiting_for_its_pool_to_empty_lets_its_orphan_be_collected() -> None:
    """Seed 8's teardown: node 3's pool deleted by the map while its old replica's LV (back with
    the drive) was still in its grace period. The pool delete fails while the LV is there and is
    planned again every pass; the collector must still scan, or the pool is never deleted."""
    from nodeos.agent.plan import plan

    st = settled()
    del st["volumes"][UUID]  # the volume is gone; its LV on node 3 is nobody's
    st["pools"]["3/p"]["state"] = "deleting"
    steps = plan(st, 3, *recs())
    assert [s.op for s in steps] == ["pool.delete"]
    assert orphans.scans_beside([s.op for s in steps])
    assert keys(st, Found(lvs=(LV,))) == [f"volume:{HEX[:24]}"]
    # Any other step in the plan may own what looks orphaned: no scan beside it.
    assert orphans.scans_beside([])
    assert not orphans.scans_beside(["pool.delete", "volume.delete"])
    assert not orphans.scans_beside(["volume.create"])
