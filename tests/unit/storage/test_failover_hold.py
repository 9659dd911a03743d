"""Issue 29: a slow but live node that holds the only in-sync replica of its volumes is not called
down. A starved lab (4 TCG VMs on 2 cores) powered one storage node off; the live primary of a
2-replica volume, its only in-sync replica then, renewed its lease late, was called down by the
leader, fenced, lifted, again and again for 20 minutes: the host had no usable path. Calling it
down fails nothing over (nobody to promote) and stops the volume. So past the suspect grace the
leader keeps such a node up (`held`) for as long as its Raft member answers; a node with a
volume that has somewhere to go, or whose Raft member falls silent, is called down as before."""

from __future__ import annotations

from nodeos.cluster import events as map_events
from nodeos.storage import failover
from nodeos.storage.failover import Leases
from nodeos.storage.lookup import health_of

from .test_failover import T, apply_all, keep_renewing, late_renewer, ready
from .test_storage_map import M, cluster, create

NOW = 1000.0
PAST_GRACE = NOW + T.down_after_s + T.suspect_grace_s + 0.01


def lone_primary(*, also: tuple[int, ...] | None = None) -> tuple[M, str]:
    """v on nodes 3 and 2, primary 3; node 2 is down (powered off), so 3 holds v's only in-sync
    replica. `also`: a second volume w with node 3 as primary on those nodes."""
    m = cluster(3)
    uuid = create(m, "v", 3, 2)
    ready(m, uuid, 3, 2)
    if also is not None:
        ready(m, create(m, "w", *also), *also)
    m.ok("node_health", node_id=2, health="down", reason="powered off")
    assert m.st["volumes"][uuid]["in_sync"] == [3]
    return m, uuid


def renewing_but_3(now: float) -> Leases:
    """Nodes 1 and 2 renew (2 to keep it simple: it is down in the map either way); node 3's
    renewals stop after `now`, its Raft member answers."""
    return late_renewer(now)


def test_a_slow_node_with_the_only_in_sync_replica_stays_suspect_past_the_grace() -> None:
    m, uuid = lone_primary()
    ls = renewing_but_3(NOW)
    t = NOW + T.down_after_s + 0.01
    keep_renewing(ls, t)
    cmds = failover.decide(m.st, ls, t, T)
    # Said once, at once, with the reason: it will not be called down while Raft answers.
    assert [(c, a["kind"], a["node"]) for c, a in cmds] == [("record_event", "node_suspect", 3)]
    assert "only in-sync replica of v" in cmds[0][1]["message"]
    assert "not called down while its Raft member answers" in cmds[0][1]["message"]
    assert "called down in" not in cmds[0][1]["message"]
    mark = map_events.last_seq(m.st)
    apply_all(m, [(c, {**a, "at": 1.0}) for c, a in cmds])
    # Past the grace, and long after: no down, no failover, no second event (20 minutes on,
    # the powered-off node's replica is re-placed, as for any secondary down that long: the new
    # copy joins the in-sync set only by node 3's report made in standing).
    for t in (PAST_GRACE, PAST_GRACE + 60.0, PAST_GRACE + 1200.0):
        keep_renewing(ls, t)
        assert failover.lease_verdict(m.st, ls, 3, t, T)[0] == "held"
        cmds = failover.decide(m.st, ls, t, T)
        assert [c for c, _ in cmds] == ([] if t < PAST_GRACE + 600 else ["volume_replace_replica"])
    assert health_of(m.st, 3) == "up" and m.st["volumes"][uuid]["primary"] == 3
    assert [e["kind"] for e in map_events.list_events(m.st, mark)] == ["node_suspect"]


def test_a_held_node_whose_raft_member_falls_silent_is_down_at_once() -> None:
    m, _ = lone_primary()
    ls = renewing_but_3(NOW)
    keep_renewing(ls, PAST_GRACE)
    assert failover.lease_verdict(m.st, ls, 3, PAST_GRACE, T)[0] == "held"
    t = PAST_GRACE + T.contact_s + 0.01
    keep_renewing(ls, t, heard=(1, 2))
    cmds = failover.decide(m.st, ls, t, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]
    assert 3 not in ls.suspect and 3 not in ls.held


def test_a_held_node_whose_data_plane_is_down_is_down_at_once() -> None:
    m, _ = lone_primary()
    m.ok("node_report", node_id=3, seq=99, dataplane={"name": "kernel", "error": "nvmet is gone"})
    ls = renewing_but_3(NOW)
    t = NOW + T.down_after_s + 0.01
    keep_renewing(ls, t)
    cmds = failover.decide(m.st, ls, t, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]


def test_a_slow_node_with_a_volume_that_can_move_is_called_down_after_the_grace() -> None:
    # Node 3 is also the primary of w on 3 and 1: w has an in-sync replica on a live node, so
    # node 3 is handled as before; w fails over, v (nobody to promote) waits on node 3, whose
    # agent keeps serving it (nodeos/agent/lease.py `sole_primaries`).
    m, uuid = lone_primary(also=(3, 1))
    ls = renewing_but_3(NOW)
    t = NOW + T.down_after_s + 0.01
    keep_renewing(ls, t)
    cmds = failover.decide(m.st, ls, t, T)
    assert [c for c, _ in cmds] == ["record_event"]
    assert "called down in" in cmds[0][1]["message"]
    keep_renewing(ls, PAST_GRACE)
    cmds = failover.decide(m.st, ls, PAST_GRACE, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]
    apply_all(m, cmds)
    cmds = failover.decide(m.st, ls, PAST_GRACE + 0.2, T)
    assert [(c, a["uuid"], a["to"]) for c, a in cmds] == [("volume_failover", "u-w", 1)]
    apply_all(m, cmds)
    assert m.st["volumes"][uuid]["primary"] == 3
    assert failover.unavailable(m.st) == ["v"]


def test_a_held_node_is_called_down_once_its_volume_has_somewhere_to_go() -> None:
    m, uuid = lone_primary()
    ls = renewing_but_3(NOW)
    keep_renewing(ls, PAST_GRACE)
    assert failover.lease_verdict(m.st, ls, 3, PAST_GRACE, T)[0] == "held"
    # Node 2 is back and node 3's mirror reports its leg in sync (a report made in standing:
    # out of it the node reports no such thing, nodeos/agent/lease.py `reportable`).
    m.ok("node_health", node_id=2, health="up", reason="back")
    m.report(3, replicas={uuid: {"state": "in-sync", "epoch": 1, "members": {2: "in-sync"}}})
    assert m.st["volumes"][uuid]["in_sync"] == [3, 2]
    t = PAST_GRACE + 1.0
    keep_renewing(ls, t)
    cmds = failover.decide(m.st, ls, t, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]


def test_a_slow_node_that_is_primary_of_nothing_is_called_down_as_before() -> None:
    m = cluster(3)
    ready(m, create(m, "v", 1, 3), 1, 3)  # node 3 holds a secondary only
    ls = renewing_but_3(NOW)
    keep_renewing(ls, PAST_GRACE)
    cmds = failover.decide(m.st, ls, PAST_GRACE, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]


def test_holding_never_makes_a_failover_nor_a_down_earlier() -> None:
    # Before its lease ran out node 3 is never suspect nor held, whatever its volumes.
    m, _ = lone_primary()
    ls = renewing_but_3(NOW)
    for dt in (0.0, T.fence_after_s, T.down_after_s - 0.01):
        keep_renewing(ls, NOW + dt)
        assert failover.lease_verdict(m.st, ls, 3, NOW + dt, T) == ("ok", "")
    # A renewal ends the episode: the next one is said again.
    keep_renewing(ls, PAST_GRACE)
    apply_all(m, [(c, {**a, "at": 1.0}) for c, a in failover.decide(m.st, ls, PAST_GRACE, T)])
    assert 3 in ls.held
    ls.renewed(3, PAST_GRACE + 0.1, T)
    keep_renewing(ls, PAST_GRACE + 0.1)
    assert failover.decide(m.st, ls, PAST_GRACE + 0.1, T) == []
    assert 3 not in ls.held and 3 not in ls.suspect


def test_held_volumes_names_only_primaries_with_nowhere_to_go() -> None:
    m, _ = lone_primary()
    assert failover.held_volumes(m.st, 3) == ["v"]
    assert failover.held_volumes(m.st, 1) == []  # primary of nothing
    m2, _ = lone_primary(also=(3, 1))
    assert failover.held_volumes(m2.st, 3) == []  # w can move: nothing is held


def test_a_leader_whose_own_renewals_run_late_is_in_contact_with_itself() -> None:
    # The lab saw the leader call even itself down: its own member is no active peer of its
    # progress tracker, so it counted as silent (down at once, never suspect nor held).
    class Pr:
        def __init__(self, active: bool) -> None:
            self.recent_active = active

    progress = {1: Pr(False), 2: Pr(False), 3: Pr(True)}
    assert failover.in_contact_now(progress, me=1) == [1, 3]
    m, uuid = lone_primary()
    ls = Leases(leader_since=NOW - 100)
    ls.renewed(1, NOW, T)
    ls.renewed(3, NOW, T)  # node 3 leads; its own renewals stop after NOW
    ls.heard(failover.in_contact_now({1: Pr(True), 2: Pr(False), 3: Pr(False)}, me=3), PAST_GRACE)
    ls.renewed(1, PAST_GRACE, T)
    assert failover.lease_verdict(m.st, ls, 3, PAST_GRACE, T)[0] == "held"
    # Counted without itself (the code before), it was silent: down at once.
    later = PAST_GRACE + T.contact_s + 0.01
    ls.heard(failover.active_peers({1: Pr(True), 2: Pr(False), 3: Pr(False)}, me=3), later)
    assert failover.lease_verdict(m.st, ls, 3, later, T)[0] == "down"
    assert m.st["volumes"][uuid]["primary"] == 3
