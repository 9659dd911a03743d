"""Issue 29, the node's side: a fence leaves out the primaries whose only in-sync replica is this
node's (nobody to promote: fencing them protects nothing and stops them), as long as nothing
this node said may give the leader somebody to promote; and out of its lease's standing the
node reports no leg in sync that the map does not count already (nodeos/agent/lease.py)."""

from __future__ import annotations

from typing import Any

from nodeos.agent.lease import LeaseKeeper, reportable, sole_primaries
from nodeos.storage.failover import LeaseTiming

T = LeaseTiming(3.0)
ME = 3


def vol(uuid: str, primary: int, nodes: tuple[int, ...], in_sync: list[int], **kw: Any) -> dict[str, Any]:
    base = {
        "uuid": uuid,
        "name": uuid,
        "primary": primary,
        "epoch": 2,
        "state": "ready",
        "replicas": len(nodes),
        "placement": [{"node": n, "pool_id": f"p{n}"} for n in nodes],
        "in_sync": in_sync,
    }
    return {**base, **kw}


def state(*vols: dict[str, Any], held: dict[str, Any] | None = None, applied: int = 40) -> dict[str, Any]:
    return {
        "applied_index": applied,
        "volumes": {v["uuid"]: v for v in vols},
        "reports": {ME: held} if held is not None else {},
    }


def held_report(seq: int, uuid: str, epoch: int, members: dict[int, str]) -> dict[str, Any]:
    return {"seq": seq, "replicas": {uuid: {"state": "in-sync", "epoch": epoch, "members": members}}}


def test_a_primary_whose_only_in_sync_replica_is_mine_is_sole() -> None:
    st = state(
        vol("lone", ME, (ME, 2), [ME]),
        vol("pair", ME, (ME, 2), [ME, 2]),
        vol("theirs", 1, (1, ME), [1]),
        vol("single", ME, (ME,), [ME], replicas=1),
        vol("making", ME, (ME, 2), [ME], state="creating"),
    )
    assert sole_primaries(st, ME, None, []) == {"lone"}


def test_what_i_said_that_may_still_land_counts() -> None:
    lone = vol("lone", ME, (ME, 2), [ME])
    # My report the map holds calls node 2 in sync at this epoch (node 2 was down then, or
    # another node's report folds it in again once 2 is up): somebody to promote soon.
    st = state(lone, held=held_report(7, "lone", 2, {2: "in-sync"}))
    assert sole_primaries(st, ME, st["reports"][ME], []) == set()
    # ... at an older epoch it adds nobody.
    st = state(lone, held=held_report(7, "lone", 1, {2: "in-sync"}))
    assert sole_primaries(st, ME, st["reports"][ME], []) == {"lone"}
    # A report in flight (seq above the held one) that calls 2 in sync: not sole; one the map
    # has replaced already (seq at or below): ignored.
    st = state(lone, held=held_report(7, "lone", 2, {2: "syncing"}))
    assert sole_primaries(st, ME, st["reports"][ME], [(8, {"lone": [2]})]) == set()
    assert sole_primaries(st, ME, st["reports"][ME], [(7, {"lone": [2]})]) == {"lone"}


def keeper(granted_at: float | None, health: str, index: int, fenced: bool) -> LeaseKeeper:
    async def no_fence(fenced: bool, keep: frozenset[str]) -> list[str]:
        return []

    k = LeaseKeeper(None, no_fence, T)
    k.granted_at, k.grant, k.fenced = granted_at, (health, index), fenced
    return k


def test_a_fence_leaves_the_sole_primaries_out_once_this_life_caught_up() -> None:
    st = state(vol("lone", ME, (ME, 2), [ME]), vol("pair", ME, (ME, 2), [ME, 2]), applied=40)
    late = 100.0 + T.fence_after_s + 0.1
    # A node that just started (never granted): everything fenced, its map may be old.
    fresh = keeper(None, "down", 0, fenced=True)
    assert fresh.fence_wanted(late, 40) and fresh.kept_open(late, st, ME, []) == frozenset()
    # Granted, map at the grant's index: while the lease holds nothing is fenced at all ...
    k = keeper(100.0, "up", 40, fenced=False)
    assert k.kept_open(100.5, st, ME, []) == frozenset()
    # ... once it ran out, the fence leaves out only the volume with nobody to promote.
    assert k.fence_wanted(late, 40)
    assert k.kept_open(late, st, ME, []) == {"lone"}
    # A grant that says down changes nothing for it: the leader has nobody to promote either.
    k.grant = ("down", 55)
    assert k.kept_open(late, {**st, "applied_index": 41}, ME, []) == {"lone"}  # caught up is kept
    # A report of mine in flight that calls node 2 in sync: fenced like any other.
    assert k.kept_open(late, st, ME, [(1, {"lone": [2]})]) == frozenset()


def test_a_node_out_of_standing_reports_no_leg_in_sync_the_map_does_not_count() -> None:
    vols = {"lone": vol("lone", ME, (ME, 2, 1), [ME, 1])}
    reps = {
        "lone": {"state": "in-sync", "epoch": 2, "members": {2: "in-sync", 1: "in-sync"}},
        "other": {"state": "syncing", "epoch": 1},
    }
    assert reportable(reps, vols, standing=True) is reps
    out = reportable(reps, vols, standing=False)
    assert out["lone"]["members"] == {2: "syncing", 1: "in-sync"}  # 1 is counted already
    assert out["other"] == reps["other"]
    assert reps["lone"]["members"][2] == "in-sync"  # not changed in place
    failed = {"lone": {"state": "in-sync", "epoch": 2, "members": {2: "failed", 1: "in-sync"}}}
    assert reportable(failed, vols, standing=False)["lone"]["members"] == {2: "failed", 1: "in-sync"}
    # A volume the map no longer holds: nobody counted.
    assert reportable(reps, {}, standing=False)["lone"]["members"] == {2: "syncing", 1: "syncing"}


def test_standing_is_what_lifts_a_fence() -> None:
    k = keeper(100.0, "up", 40, fenced=True)
    assert not k.standing(100.5, 39)  # map behind the grant
    assert k.standing(100.5, 40)
    assert not k.standing(100.0 + T.fence_after_s, 40)
    assert not keeper(100.0, "down", 40, fenced=False).standing(100.5, 40)
