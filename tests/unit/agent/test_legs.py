"""A primary never acknowledges a write an in-sync replica lacks (pure decisions): a leg whose
controller is not live for too long is reported failed; it leaves the mirror only once the map,
at the volume's epoch, no longer counts that replica in sync, nor may a report in flight."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodeos.agent import legs
from nodeos.dataplane.mirror_names import replica_nqn

UUID = "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"
NQN2, NQN3 = replica_nqn(UUID, "2"), replica_nqn(UUID, "3")


@dataclass(frozen=True)
class Remote:
    nqn: str
    state: str


def vol(primary: int = 1, epoch: int = 2, in_sync: list[int] | None = None) -> dict[str, Any]:
    return {
        "uuid": UUID,
        "primary": primary,
        "epoch": epoch,
        "in_sync": [1, 2, 3] if in_sync is None else in_sync,
        "placement": [{"node": n, "pool_id": f"p{n}"} for n in (1, 2, 3)],
    }


REC = {"uuid": UUID, "epoch": 2, "remotes": [{"node": 2}, {"node": 3}]}


def held(seq: int, members: dict[int, str] | None = None, epoch: int = 2) -> dict[str, Any]:
    return {"seq": seq, "replicas": {UUID: {"epoch": epoch, "members": members or {}}}}


def test_a_leg_is_reported_failed_only_after_its_controller_is_not_live_for_the_bound() -> None:
    since = legs.not_live_since({}, [Remote(NQN2, "connecting"), Remote(NQN3, "live")], 100.0)
    assert since == {NQN2: 100.0}
    since = legs.not_live_since(since, [Remote(NQN2, "resetting"), Remote(NQN3, "live")], 102.0)
    assert since == {NQN2: 100.0}  # still the first moment it was seen down
    assert legs.down_nodes(REC, since, 100.0 + legs.LEG_DOWN_S) == set()
    assert legs.down_nodes(REC, since, 100.1 + legs.LEG_DOWN_S) == {2}


def test_a_controller_live_again_before_the_bound_simply_goes_on() -> None:
    since = legs.not_live_since({}, [Remote(NQN2, "connecting")], 100.0)
    since = legs.not_live_since(since, [Remote(NQN2, "live")], 102.0)
    assert since == {}
    assert legs.down_nodes(REC, since, 200.0) == set()
    # down again later: counted from then, not from the first outage
    since = legs.not_live_since(since, [Remote(NQN2, "connecting")], 150.0)
    assert legs.down_nodes(REC, since, 152.0) == set()


def test_a_gone_controller_is_not_tracked_md_sees_its_device_missing() -> None:
    since = legs.not_live_since({NQN2: 1.0}, [], 9.0)
    assert since == {} and legs.down_nodes(REC, since, 99.0) == set()


def test_a_down_leg_leaves_the_mirror_only_once_the_map_drops_it_at_this_epoch() -> None:
    sent: list[legs.Sent] = []
    assert legs.removable(vol(), REC, 1, {2}, held(5, {2: "failed", 3: "in-sync"}), sent) == []
    assert legs.removable(vol(in_sync=[1, 3]), REC, 1, {2}, held(5, {2: "failed", 3: "in-sync"}), sent) == [2]


def test_no_leg_leaves_while_a_report_of_mine_in_flight_or_held_may_count_it_again() -> None:
    dropped = vol(in_sync=[1, 3])  # e.g. dropped because node 2 was called down
    # the map holds my report calling node 2 in sync: node 2 up again would be re-added
    assert legs.removable(dropped, REC, 1, {2}, held(5, {2: "in-sync"}), []) == []
    # my report saying failed is in flight (seq 6 > held 5), an older one (seq 5) said in-sync
    assert legs.removable(dropped, REC, 1, {2}, held(4, {}), [(5, {UUID: [2, 3]}), (6, {UUID: [3]})]) == []
    # the map holds seq 6: the report calling it in sync can no longer land
    assert legs.removable(dropped, REC, 1, {2}, held(6, {2: "failed"}), [(5, {UUID: [2, 3]})]) == [2]
    # a held report of an older epoch says nothing about this mirror
    assert legs.removable(dropped, REC, 1, {2}, held(6, {2: "in-sync"}, epoch=1), []) == [2]


def test_only_the_current_primary_at_its_epoch_removes_a_leg() -> None:
    dropped = held(6, {2: "failed"})
    assert legs.removable(vol(primary=2, in_sync=[2, 3]), REC, 1, {2}, dropped, []) == []
    assert legs.removable(vol(epoch=3, in_sync=[1, 3]), REC, 1, {2}, dropped, []) == []
    assert legs.removable(None, REC, 1, {2}, dropped, []) == []
    assert legs.removable(vol(in_sync=[1, 3]), REC, 1, set(), dropped, []) == []  # live: stays


def test_a_primary_holds_writes_for_a_leg_its_own_report_in_flight_calls_in_sync() -> None:
    # the map does not count node 2 yet, but my report calling it in sync (rebuilt) may land
    assert legs.pending(vol(in_sync=[1, 3]), REC, 1, {2: "failed"}, held(4, {}), [(5, {UUID: [2]})]) == [2]
    assert legs.pending(vol(in_sync=[1, 3]), REC, 1, {2: "failed"}, held(5, {2: "failed"}), []) == []


def test_a_report_keeps_the_nodes_it_calls_in_sync() -> None:
    assert legs.in_sync_called({3: "in-sync", 2: "failed", 4: "syncing"}) == [3]


def upgrading(
    step: str = "update", state: str = "running", released: list[int] | None = None
) -> dict[str, Any]:
    """A map whose rolling upgrade released node 2 for its update (upgrade_step v2)."""
    domains = [{"name": "rack=b", "nodes": [2]}]
    up = {"state": state, "step": step, "at": 0, "domains": domains, "released": released or [2]}
    return {"upgrade": up}


def test_a_released_nodes_leg_leaves_at_once_its_controller_live_once_the_map_drops_it() -> None:
    st = upgrading()
    attached = {NQN2, NQN3}
    assert legs.released_legs(st, REC, attached) == {2}
    assert legs.released_legs(st, REC, {NQN3}) == set()  # cut already: nothing to do again
    assert legs.released_legs(upgrading(step="sync"), REC, attached) == set()  # release ended
    assert legs.released_legs(upgrading(state="aborted"), REC, attached) == set()
    assert legs.released_legs(upgrading(state="stopped"), REC, attached) == set()  # an operator's turn
    # My held report and one in flight still call node 2 in sync: no matter, the map does not
    # count a released node again; nothing is down, yet its leg goes.
    in_flight: list[legs.Sent] = [(6, {UUID: [2, 3]})]
    mine = held(5, {2: "in-sync", 3: "in-sync"})
    assert legs.removable(vol(in_sync=[1, 3]), REC, 1, set(), mine, in_flight, {2}) == [2]
    # ... but never while the map still counts it in sync (the release not applied here yet)
    assert legs.removable(vol(), REC, 1, set(), mine, in_flight, {2}) == []
    # not released: a live leg stays, as before
    assert legs.removable(vol(in_sync=[1, 3]), REC, 1, set(), mine, in_flight) == []


def test_a_released_leg_cut_on_purpose_does_not_hold_the_primarys_writes() -> None:
    # Cut: md shows it failed, while my held report (sent before the cut) still calls it in sync.
    mine = held(5, {2: "in-sync", 3: "in-sync"})
    assert legs.pending(vol(in_sync=[1, 3]), REC, 1, {2: "failed", 3: "in-sync"}, mine, [], {2}) == []
    # not released: the same is a lost leg the map may count again, held for
    assert legs.pending(vol(in_sync=[1, 3]), REC, 1, {2: "failed", 3: "in-sync"}, mine, []) == [2]
