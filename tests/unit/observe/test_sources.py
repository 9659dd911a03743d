"""Events the node derives from two successive readings of itself and the cluster."""

from __future__ import annotations

from typing import Any

from nodeos.observe import sources


def leader_view(progress: dict[int, bool], leader: int = 1, term: int = 2, **map_: Any) -> dict[str, Any]:
    return sources.digest(
        {
            "member": True,
            "node_id": 1,
            "leader": leader,
            "term": term,
            "progress": {n: {"active": a} for n, a in progress.items()},
            "map": map_,
        }
    )


def kinds(prev: dict[str, Any], cur: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in sources.changes(prev, cur, 1000.0)]


def test_first_reading_reports_nothing() -> None:
    assert kinds({}, {"cluster": leader_view({1: True, 2: True}), "dataplane_up": True}) == []


def test_leader_change_member_lost_and_back() -> None:
    a = {"cluster": leader_view({1: True, 2: True, 3: True})}
    b = {"cluster": leader_view({1: True, 2: True, 3: False})}
    c = {"cluster": leader_view({1: True, 2: True, 3: True})}
    evs = sources.changes(a, b, 1.0)
    assert [(e["kind"], e["node"], e["severity"]) for e in evs] == [("node_failed", 3, "critical")]
    assert kinds(b, c) == ["node_recovered"]
    follower = {"cluster": sources.digest({"member": True, "node_id": 2, "leader": 3, "term": 5})}
    evs = sources.changes(c, follower, 1.0)
    assert [(e["kind"], e["node"], e["term"]) for e in evs] == [("leader_changed", 3, 5)]


def test_members_joining_and_leaving() -> None:
    a = {"cluster": leader_view({1: True, 2: True})}
    b = {"cluster": leader_view({1: True, 3: True})}
    assert kinds(a, b) == ["node_joined", "node_left"]


def test_rebuild_start_and_finish_and_no_second_failover_event() -> None:
    """A failover (epoch bump) is the map's own event; the watcher reports only rebuilds."""
    v0 = {"u1": {"name": "v1", "epoch": 3, "primary": 1}}
    v1 = {"u1": {"name": "v1", "epoch": 4, "primary": 2}}
    r0 = {"u1": {1: {"state": "in_sync"}, 2: {"state": "in_sync"}}}
    r1 = {"u1": {1: {"state": "rebuilding"}, 2: {"state": "in_sync"}}}
    r2 = {"u1": {1: {"state": "in_sync"}, 2: {"state": "in_sync"}}}
    a = {"cluster": leader_view({1: True, 2: True}, volumes=v0, replica_states=r0)}
    b = {"cluster": leader_view({1: True, 2: True}, volumes=v1, replica_states=r1)}
    c = {"cluster": leader_view({1: True, 2: True}, volumes=v1, replica_states=r2)}
    evs = sources.changes(a, b, 1.0)
    assert [e["kind"] for e in evs] == ["rebuild_started"]
    assert kinds(b, c) == ["rebuild_finished"]


def test_dataplane_and_drift() -> None:
    up = {"cluster": {}, "dataplane_up": True, "drift_items": 0}
    down = {"cluster": {}, "dataplane_up": False, "dataplane_error": "spdk socket refused", "drift_items": 2}
    evs = sources.changes(up, down, 1.0)
    assert [e["kind"] for e in evs] == ["dataplane_down", "drift_found"]
    assert "spdk socket refused" in evs[0]["message"]
    assert kinds(down, up) == ["dataplane_up", "drift_cleared"]


def test_dataplane_up_rule() -> None:
    assert sources.dataplane_up({"usable": True}, None)
    assert not sources.dataplane_up({"usable": False}, None)
    assert not sources.dataplane_up(None, "refused")
    assert sources.cluster_view(None) == {"member": False}


def test_a_drive_of_this_node_turning_failing() -> None:
    def view(health: str) -> dict[str, Any]:
        rep = {1: {"drives": [{"id": "S1", "health": health}, {"serial": "S2", "health": "ok"}]}}
        return {
            "cluster": sources.digest({"member": True, "node_id": 1, "leader": 2, "map": {"reports": rep}})
        }

    evs = sources.changes(view("ok"), view("failing"), 1.0)
    assert [(e["kind"], e["drive"], e["node"]) for e in evs] == [("drive_failed", "S1", 1)]
    assert kinds(view("failing"), view("failing")) == []


def test_a_member_counts_as_failed_only_after_the_hold_time() -> None:
    down_since: dict[Any, float] = {}

    def reading(active3: bool, now: float) -> dict[str, Any]:
        r = {"cluster": leader_view({1: True, 2: True, 3: active3})}
        sources.hold_liveness(r, down_since, now, hold_s=3.0)
        return r

    a = reading(True, 0.0)
    blip = reading(False, 1.0)  # Raft cleared its flag; the next heartbeat answer sets it again
    assert kinds(a, blip) == []
    back = reading(True, 1.1)
    assert kinds(blip, back) == [] and down_since == {}
    s1, s2 = reading(False, 10.0), reading(False, 12.9)
    assert kinds(back, s1) == [] and kinds(s1, s2) == []
    gone = reading(False, 13.0)
    assert kinds(s2, gone) == ["node_failed"]
    assert kinds(gone, reading(True, 14.0)) == ["node_recovered"]
