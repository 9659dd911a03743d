"""Leases, node health, the in-sync set and failover decisions, as the leader takes them and the
map applies them: a node is called down only after its lease ran out, a failover goes to an
in-sync replica on a live node and bumps the epoch, a stale copy is never promoted, and a
decision overtaken by another is refused at apply."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.cluster import events as map_events
from nodeos.errors import BadInput
from nodeos.storage import failover
from nodeos.storage.failover import Leases, LeaseTiming
from nodeos.storage.lookup import health_of

from .test_storage_map import M, cluster, create

T = LeaseTiming(3.0)


def ready(m: M, uuid: str, *nodes: int) -> dict[str, Any]:
    for n in nodes:
        m.report(n, replicas={uuid: {"state": "in-sync"}})
    vol = m.st["volumes"][uuid]
    assert vol["state"] == "ready"
    return vol


def apply_all(m: M, cmds: list[tuple[str, dict[str, Any]]]) -> None:
    for cmd, args in cmds:
        m.ok(cmd, **args)


def leases_all_renewing(now: float, *nodes: int) -> Leases:
    ls = Leases(leader_since=now - 100)
    for n in nodes:
        ls.renewed(n, now, T)
    return ls


def test_lease_timing_orders_fence_before_down() -> None:
    assert T.renew_s < T.fence_after_s < T.lease_s < T.down_after_s
    with pytest.raises(BadInput) as e:
        LeaseTiming(0.2)
    assert e.value.field == "lease_s"


def test_a_node_is_down_only_after_its_lease_and_a_new_leader_waits_a_whole_lease() -> None:
    m = cluster(3)
    now = 1000.0
    ls = leases_all_renewing(now, 1, 2, 3)
    assert failover.decide(m.st, ls, now + T.down_after_s - 0.01, T) == []
    ls.renewed(1, now + 2, T)
    ls.renewed(2, now + 2, T)
    cmds = failover.decide(m.st, ls, now + T.down_after_s + 0.01, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]
    # A leader that just took over knows no renewal: it counts from its own start.
    fresh = Leases(leader_since=now)
    assert failover.decide(m.st, fresh, now + T.down_after_s - 0.01, T) == []
    assert len(failover.decide(m.st, fresh, now + T.down_after_s + 0.01, T)) == 3


def test_a_member_that_joins_later_gets_a_whole_lease() -> None:
    m = cluster(2)
    now = 100.0
    ls = leases_all_renewing(now, 1, 2)
    assert failover.decide(m.st, ls, now, T) == []
    m.ok("add_node", node_id=3, name="s3")
    ls.renewed(1, now + 3, T)
    ls.renewed(2, now + 3, T)
    assert failover.decide(m.st, ls, now + 3, T) == []  # first seen now, not 100 s late
    assert failover.decide(m.st, ls, now + 3 + T.down_after_s - 0.01, T) == []
    ls.renewed(1, now + 6, T)
    ls.renewed(2, now + 6, T)
    cmds = failover.decide(m.st, ls, now + 3 + T.down_after_s + 0.01, T)
    assert [(a["node_id"], a["health"]) for _, a in cmds] == [(3, "down")]


def test_a_node_comes_back_up_only_after_renewing_steadily() -> None:
    m = cluster(2)
    m.ok("node_health", node_id=2, health="down", reason="test")
    now = 50.0
    ls = leases_all_renewing(now, 1)
    t = now
    ls.renewed(2, t, T)
    assert failover.decide(m.st, ls, t, T) == []  # one renewal is not enough
    while t < now + T.up_after_s:
        t += T.renew_s
        ls.renewed(1, t, T)
        ls.renewed(2, t, T)
    assert failover.decide(m.st, ls, t, T) == [
        ("node_health", {"node_id": 2, "health": "up", "reason": "renews its lease again"})
    ]
    # A gap in the renewals starts the count again.
    ls2 = leases_all_renewing(now, 1)
    ls2.renewed(2, now, T)
    ls2.renewed(2, now + T.up_after_s, T)
    ls2.renewed(1, now + T.up_after_s, T)
    assert failover.decide(m.st, ls2, now + T.up_after_s, T) == []


def test_primary_down_fails_over_to_the_first_in_sync_replica_and_bumps_the_epoch() -> None:
    m = cluster(3)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    assert vol["in_sync"] == [1, 2, 3] and vol["epoch"] == 1
    m.ok("node_health", node_id=1, health="down", reason="lease ran out")
    now = 10.0
    cmds = failover.decide(m.st, leases_all_renewing(now, 2, 3), now, T)
    assert cmds == [("volume_failover", {"uuid": uuid, "epoch": 1, "to": 2, "reason": "node 1 is down"})]
    mark = map_events.last_seq(m.st)
    apply_all(m, cmds)
    assert (vol["primary"], vol["epoch"], vol["in_sync"]) == (2, 2, [2, 3])
    assert m.st["paths"][uuid] == {1: "inaccessible", 2: "optimized", 3: "inaccessible"}
    ev = [e for e in map_events.list_events(m.st, mark) if e["kind"] == "failover"]
    assert ev and ev[0]["epoch"] == 2 and ev[0]["node"] == 2
    # Once applied, nothing more to decide.
    assert failover.decide(m.st, leases_all_renewing(now, 2, 3), now, T) == []
    # The same decision again (a retry by an old leader) is refused: the epoch moved on.
    out = m.do("volume_failover", uuid=uuid, epoch=1, to=3, reason="late")
    assert out["error"]["field"] == "epoch" and vol["primary"] == 2


def test_a_primary_down_in_the_map_is_failed_over_only_once_its_lease_ran_out_here() -> None:
    # `down` may come from an earlier leader, or be applied after a renewal this leader granted
    # since: the old primary may be serving. Found by the simulator's failover workload (a new
    # leader failed a volume over 0.1 s after taking over: two writable primaries).
    m = cluster(3)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=1, health="down", reason="called down by the last leader")
    fresh = Leases(leader_since=100.0)  # a new leader knows no grant of the old one
    assert failover.decide(m.st, fresh, 100.0 + T.down_after_s - 0.01, T) == []
    renewing = leases_all_renewing(200.0, 1, 2, 3)  # node 1 renewed with this leader since
    assert failover.decide(m.st, renewing, 200.0 + T.down_after_s - 0.01, T) == []
    later = 200.0 + T.down_after_s + 0.01
    renewing.renewed(2, later, T)
    renewing.renewed(3, later, T)
    cmds = failover.decide(m.st, renewing, later, T)
    assert [(c, a["to"]) for c, a in cmds] == [("volume_failover", 2)]


def test_a_stale_replica_is_never_promoted() -> None:
    m = cluster(2)
    uuid = create(m, "v", 1, 2)
    vol = ready(m, uuid, 1, 2)
    # The primary's mirror lost node 2's leg: the primary kept writing alone.
    m.report(1, replicas={uuid: {"state": "degraded", "members": {2: "failed"}, "epoch": 1}})
    assert vol["in_sync"] == [1]
    m.ok("node_health", node_id=1, health="down", reason="lease ran out")
    assert failover.decide(m.st, leases_all_renewing(5.0, 2), 5.0, T) == []
    assert failover.unavailable(m.st) == ["v"]
    out = m.do("volume_failover", uuid=uuid, epoch=1, to=2)
    assert out["error"]["field"] == "to" and vol["primary"] == 1
    # The in-sync set is never emptied.
    m.report(1, replicas={uuid: {"state": "failed", "epoch": 1}})
    assert vol["in_sync"] == [1]


def test_node_down_records_the_same_events_whatever_the_order_of_the_volumes() -> None:
    # Every node applies the command to its own map, whose dicts may be in another order (a
    # map read back from a snapshot): the events, and so the map, must come out the same.
    # Found by the simulator's failover workload (map divergence after a restart).
    def events_after_node_down(order: list[str]) -> list[tuple[str, Any]]:
        m = cluster(3)
        for name in order:
            ready(m, create(m, name, 1, 2, 3), 1, 2, 3)
        mark = map_events.last_seq(m.st)
        m.ok("node_health", node_id=3, health="down", reason="lease ran out")
        return [(e["kind"], e.get("volume")) for e in map_events.list_events(m.st, mark)]

    got = events_after_node_down(["a", "b", "c"])
    assert got == events_after_node_down(["c", "b", "a"])
    assert [v for k, v in got if k == "replica_out_of_sync"] == ["u-a", "u-b", "u-c"]


def test_a_down_secondary_leaves_the_in_sync_set_and_rejoins_when_the_mirror_says_so() -> None:
    m = cluster(3)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=3, health="down", reason="lease ran out")
    assert vol["in_sync"] == [1, 2]
    m.ok("node_health", node_id=3, health="up", reason="back")
    m.report(1, replicas={uuid: {"state": "degraded", "members": {2: "in-sync", 3: "syncing"}, "epoch": 1}})
    assert vol["in_sync"] == [1, 2]
    m.report(1, replicas={uuid: {"state": "in-sync", "members": {2: "in-sync", 3: "in-sync"}, "epoch": 1}})
    assert vol["in_sync"] == [1, 2, 3]


def test_only_the_current_epochs_primary_speaks_for_the_in_sync_set() -> None:
    m = cluster(3)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=1, health="down", reason="x")
    m.ok("volume_failover", uuid=uuid, epoch=1, to=2, reason="x")
    # The old primary's late report (epoch 1) claims node 1's own leg and node 3 in sync:
    m.report(1, replicas={uuid: {"state": "in-sync", "members": {3: "failed"}, "epoch": 1}})
    assert vol["in_sync"] == [2, 3]
    # The new primary, at epoch 2, rebuilt node 1 (it came back): only now it rejoins.
    m.ok("node_health", node_id=1, health="up", reason="back")
    m.report(2, replicas={uuid: {"state": "in-sync", "members": {1: "in-sync", 3: "in-sync"}, "epoch": 2}})
    assert vol["in_sync"] == [1, 2, 3]


def test_bad_health_and_failover_commands_change_nothing() -> None:
    m = cluster(2)
    uuid = create(m, "v", 1, 2)
    ready(m, uuid, 1, 2)
    before = repr(m.st["volumes"]) + repr(m.st["nodes"])
    assert m.do("node_health", node_id=1, health="sick")["error"]["field"] == "health"
    assert m.do("node_health", node_id=9, health="down")["error"]["field"] == "node_id"
    assert m.do("volume_failover", uuid="nope", epoch=1, to=2)["error"]["field"] == "uuid"
    assert m.do("volume_failover", uuid=uuid, epoch=1, to=1)["error"]["field"] == "to"
    assert m.do("volume_failover", uuid=uuid, epoch=1, to=7)["error"]["field"] == "to"
    assert repr(m.st["volumes"]) + repr(m.st["nodes"]) == before
    # A replica on a node that is down is not promoted either.
    m.ok("node_health", node_id=2, health="down")
    assert m.do("volume_failover", uuid=uuid, epoch=1, to=2)["error"]["field"] == "to"
    assert m.st["volumes"][uuid]["primary"] == 1


def test_a_draining_primary_hands_off_first_and_fails_over_once_it_confirmed() -> None:
    m = cluster(3)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    m.ok("node_set_state", node_id=2, state="draining")
    m.ok("node_set_state", node_id=1, state="draining")
    now = 10.0
    ls = leases_all_renewing(now, 1, 2, 3)
    # Never to another draining node: node 3, though node 2 comes first in placement.
    assert failover.decide(m.st, ls, now, T) == [("volume_handoff", {"uuid": uuid, "epoch": 1, "to": 3})]
    apply_all(m, failover.decide(m.st, ls, now, T))
    assert vol["primary"] == 1 and vol["handoff"] == {"to": 3, "epoch": 1}
    assert failover.decide(m.st, ls, now, T) == []  # waits for the primary to confirm
    m.report(1, replicas={uuid: {"state": "in-sync", "epoch": 1, "handed_off": 0}})
    assert failover.decide(m.st, ls, now, T) == []  # not at this epoch
    m.report(1, replicas={uuid: {"state": "in-sync", "epoch": 1, "handed_off": 1}})
    cmds = failover.decide(m.st, ls, now, T)
    assert [(c, a["to"], a["epoch"]) for c, a in cmds] == [("volume_failover", 3, 1)]
    apply_all(m, cmds)
    assert (vol["primary"], vol["epoch"], vol["handoff"]) == (3, 2, None)
    assert failover.decide(m.st, ls, now, T) == []


def test_unplanned_failover_prefers_a_node_that_stays_and_takes_a_draining_one_if_alone() -> None:
    m = cluster(3)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    m.ok("node_set_state", node_id=2, state="draining")
    m.ok("node_health", node_id=1, health="down")
    assert failover.failover_target(m.st, m.st["volumes"][uuid]) == 3
    m.ok("node_health", node_id=3, health="down")
    assert failover.failover_target(m.st, m.st["volumes"][uuid]) == 2
    assert failover.failover_target(m.st, m.st["volumes"][uuid], planned=True) is None


def test_undrain_withdraws_a_pending_handoff_and_a_late_planned_failover_is_refused() -> None:
    m = cluster(2)
    uuid = create(m, "v", 1, 2)
    vol = ready(m, uuid, 1, 2)
    m.ok("node_set_state", node_id=1, state="draining")
    ls = leases_all_renewing(10.0, 1, 2)
    apply_all(m, failover.decide(m.st, ls, 10.0, T))
    m.report(1, replicas={uuid: {"state": "in-sync", "epoch": 1, "handed_off": 1}})
    late = failover.decide(m.st, ls, 10.0, T)  # decided before the undrain below commits
    m.ok("node_set_state", node_id=1, state="active")
    assert vol["handoff"] is None
    out = m.do(late[0][0], **late[0][1])
    assert out["error"]["field"] == "planned" and vol["primary"] == 1 and vol["epoch"] == 1
    # The agent side: the old primary is no longer asked to stop serving.
    from nodeos.agent import handoff

    recs = {"v": {"uuid": uuid, "name": "v", "role": "primary", "state": "ready", "epoch": 1}}
    assert handoff.wanted(m.st, 1, recs) == {}
    m.ok("node_set_state", node_id=1, state="draining")
    apply_all(m, failover.decide(m.st, ls, 10.0, T))
    assert handoff.wanted(m.st, 1, recs) == {uuid: 1}
    assert handoff.wanted(m.st, 2, recs) == {}  # only the primary itself hands off


def test_rebuild_limit_is_kept_per_node_and_bad_values_change_nothing(tmp_path: Any) -> None:
    m = cluster(2)
    m.ok("node_rebuild_limit", node_id=2, mbps=50)
    assert m.st["nodes"][2]["rebuild_mbps"] == 50 and "rebuild_mbps" not in m.st["nodes"][1]
    for bad in (0, -1, 10**6, "fast", 1.5, True):
        assert m.do("node_rebuild_limit", node_id=2, mbps=bad)["error"]["field"] == "rebuild_mbps"
    assert m.st["nodes"][2]["rebuild_mbps"] == 50
    m.ok("node_rebuild_limit", node_id=2, mbps=None)
    assert m.st["nodes"][2]["rebuild_mbps"] is None
    # The kernel side: md's node-wide cap, in KiB/s, and its floor under host I/O, read back.
    from nodeos.dataplane.kernel.mirror import RAID_SPEED_DEFAULT_KIB, RAID_SPEED_FLOOR_KIB, MdMirrors

    cap, floor = tmp_path / "speed_limit_max", tmp_path / "speed_limit_min"
    cap.write_text("200000\n")
    floor.write_text("1000\n")  # the kernel's default floor: a rebuild under host writes crawls
    MdMirrors().set_rebuild_limit(None, cap, floor)
    assert (cap.read_text().strip(), floor.read_text().strip()) == (
        str(RAID_SPEED_DEFAULT_KIB),
        str(RAID_SPEED_FLOOR_KIB),
    )
    MdMirrors().set_rebuild_limit(20_000, cap, floor)  # a cap below the floor: the floor is the cap
    assert (cap.read_text().strip(), floor.read_text().strip()) == ("20000", "20000")
    MdMirrors().set_rebuild_limit(None, cap, floor)
    assert (cap.read_text().strip(), floor.read_text().strip()) == (
        str(RAID_SPEED_DEFAULT_KIB),
        str(RAID_SPEED_FLOOR_KIB),
    )


def test_md_floor_is_never_above_its_cap_between_writes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """md's floor and cap are two files written one after the other: at no point between the
    writes may the floor exceed the cap, going up or down."""
    from pathlib import Path

    from nodeos.dataplane.kernel.mirror import MdMirrors

    cap, floor = tmp_path / "speed_limit_max", tmp_path / "speed_limit_min"
    cap.write_text("200000\n")
    floor.write_text("1000\n")
    write = Path.write_text

    def checked(self: Path, data: str, *a: Any, **kw: Any) -> int:
        n = write(self, data, *a, **kw)
        assert int(floor.read_text()) <= int(cap.read_text()), (self.name, data)
        return n

    monkeypatch.setattr(Path, "write_text", checked)
    for kib in (None, 10_000, 300_000, 5_000, None, 40_000, 100_000):
        MdMirrors().set_rebuild_limit(kib, cap, floor)


# --- suspect before down: a slow but live node is not flapped (issue 9, liveness) ---


def late_renewer(now: float) -> Leases:
    """Nodes 1-3 renewed at `now`; afterwards only 1 and 2 renew, node 3's renewals stop."""
    ls = leases_all_renewing(now, 1, 2, 3)
    ls.heard([1, 2, 3], now)
    return ls


def keep_renewing(ls: Leases, t: float, *, heard: tuple[int, ...] = (1, 2, 3)) -> None:
    ls.renewed(1, t, T)
    ls.renewed(2, t, T)
    ls.heard(heard, t)


def test_a_node_whose_raft_still_answers_is_suspect_for_one_more_lease_then_down() -> None:
    m = cluster(3)
    now = 1000.0
    ls = late_renewer(now)
    t = now + T.down_after_s + 0.01
    keep_renewing(ls, t)
    assert failover.lease_verdict(m.st, ls, 3, t, T)[0] == "suspect"
    cmds = failover.decide(m.st, ls, t, T)
    assert [(c, a["kind"], a["node"]) for c, a in cmds] == [("record_event", "node_suspect", 3)]
    assert "still answers" in cmds[0][1]["reason"]
    mark = map_events.last_seq(m.st)
    m.ok("record_event", **cmds[0][1], at=1.0)  # the map takes it as the shell stamps it
    assert [e["kind"] for e in map_events.list_events(m.st, mark)] == ["node_suspect"]
    # Said once: the next looks, still within the grace, decide nothing.
    t += 0.2
    keep_renewing(ls, t)
    assert failover.decide(m.st, ls, t, T) == []
    t = now + T.down_after_s + T.suspect_grace_s - 0.01
    keep_renewing(ls, t)
    assert failover.decide(m.st, ls, t, T) == []
    assert health_of(m.st, 3) == "up"
    # One grace later it is called down, Raft contact or not.
    t = now + T.down_after_s + T.suspect_grace_s + 0.01
    keep_renewing(ls, t)
    cmds = failover.decide(m.st, ls, t, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]
    assert "although its Raft member still answers" in cmds[0][1]["reason"]
    assert 3 not in ls.suspect


def test_a_suspect_node_that_renews_again_is_never_called_down() -> None:
    m = cluster(3)
    now = 1000.0
    ls = late_renewer(now)
    t = now + T.down_after_s + 0.5
    keep_renewing(ls, t)
    assert [c for c, _ in failover.decide(m.st, ls, t, T)] == ["record_event"]
    ls.renewed(3, t + 0.1, T)  # late, but it came
    for k in range(int(2 * T.lease_s / 0.2)):
        keep_renewing(ls, t + 0.1 + 0.2 * k)
        ls.renewed(3, t + 0.1 + 0.2 * k, T)
        assert failover.decide(m.st, ls, t + 0.1 + 0.2 * k, T) == []
    assert 3 not in ls.suspect  # a later episode is reported again


def test_a_node_the_leader_lost_contact_with_is_down_at_once_as_its_lease_runs_out() -> None:
    m = cluster(3)
    now = 1000.0
    ls = late_renewer(now)
    # Raft last saw node 3 active just before its lease ran out: down, no grace.
    t = now + T.down_after_s + 0.01
    keep_renewing(ls, t, heard=(1, 2))
    ls.heard([3], t - T.contact_s - 0.01)
    assert failover.lease_verdict(m.st, ls, 3, t, T)[0] == "down"
    cmds = failover.decide(m.st, ls, t, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]
    assert cmds[0][1]["reason"].startswith("no lease renewal for")
    # Never heard at all (a new leader, a dead node): down as its lease runs out too.
    fresh = Leases(leader_since=now)
    fresh.heard([1, 2], now + T.down_after_s + 0.01)
    assert failover.lease_verdict(m.st, fresh, 3, now + T.down_after_s + 0.01, T)[0] == "down"


def test_a_suspect_node_that_loses_contact_is_down_at_once() -> None:
    m = cluster(3)
    now = 1000.0
    ls = late_renewer(now)
    t = now + T.down_after_s + 0.01
    keep_renewing(ls, t)
    assert [c for c, _ in failover.decide(m.st, ls, t, T)] == ["record_event"]
    t2 = t + T.contact_s + 0.01
    keep_renewing(ls, t2, heard=(1, 2))
    assert t2 < now + T.down_after_s + T.suspect_grace_s
    cmds = failover.decide(m.st, ls, t2, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]


def test_a_node_whose_data_plane_is_down_gets_no_grace_though_its_raft_answers() -> None:
    # Its Raft member answers, but it withholds its renewals on purpose (nodeos/node/dpwatch.py).
    m = cluster(3)
    m.ok("node_report", node_id=3, seq=99, dataplane={"name": "kernel", "error": "nvmet is gone"})
    now = 1000.0
    ls = late_renewer(now)
    t = now + T.down_after_s + 0.01
    keep_renewing(ls, t)
    cmds = failover.decide(m.st, ls, t, T)
    assert [(c, a["node_id"], a["health"]) for c, a in cmds] == [("node_health", 3, "down")]
    assert "data plane is down" in cmds[0][1]["reason"]


def test_suspicion_never_makes_a_node_down_or_a_failover_earlier() -> None:
    # Before its lease ran out a node is never suspect nor down, whatever Raft says; and a
    # suspect primary's volume does not fail over: only a map `down` (decided as above) does.
    m = cluster(3)
    uuid = create(m, "v", 3, 1, 2)
    vol = ready(m, uuid, 3, 1, 2)
    now = 1000.0
    ls = late_renewer(now)
    for dt in (0.0, T.fence_after_s, T.down_after_s - 0.01):
        keep_renewing(ls, now + dt, heard=(1, 2))
        assert failover.lease_verdict(m.st, ls, 3, now + dt, T) == ("ok", "")
        assert failover.decide(m.st, ls, now + dt, T) == []
    t = now + T.down_after_s + 0.01
    keep_renewing(ls, t)
    apply_all(m, [(c, {**a, "at": 1.0}) for c, a in failover.decide(m.st, ls, t, T)])
    t += T.suspect_grace_s / 2
    keep_renewing(ls, t)
    assert failover.decide(m.st, ls, t, T) == [] and vol["primary"] == 3


def test_the_suspect_bounds() -> None:
    # What docs/cluster.md promises: a dead node is down lease + 10 % + 0.2 s after its last
    # renewal, a live but slow one at most one lease later.
    for lease in (3.0, 8.0):
        t = LeaseTiming(lease)
        assert t.down_after_s == pytest.approx(1.1 * lease + 0.2)
        assert t.down_after_s + t.suspect_grace_s == pytest.approx(2.1 * lease + 0.2)
        assert t.contact_s < t.suspect_grace_s


def test_active_peers_reads_the_progress_tracker_without_the_leader_itself() -> None:
    class Pr:
        def __init__(self, active: bool) -> None:
            self.recent_active = active

    assert failover.active_peers({1: Pr(True), 2: Pr(False), 3: Pr(True)}, me=1) == [3]


def _planned_move(m: M, uuid: str) -> dict[str, Any]:
    """Drain node 1 until the leader decides the planned move of `uuid` to node 2 (its args)."""
    m.ok("node_set_state", node_id=1, state="draining")
    ls = leases_all_renewing(10.0, 1, 2)
    apply_all(m, failover.decide(m.st, ls, 10.0, T))
    m.report(1, replicas={uuid: {"state": "in-sync", "epoch": 1, "handed_off": 1}})
    [(cmd, args)] = failover.decide(m.st, ls, 10.0, T)
    assert cmd == "volume_failover" and args["planned"]
    return args


def test_a_planned_move_applies_only_while_the_old_primary_still_reports_its_handoff() -> None:
    """The failover simulator's seed 1840: the old primary restarted between the leader's decision
    and its commit and reported again without `handed_off` (it may serve again); v1 moved anyway."""
    from nodeos.cluster import features
    from nodeos.cluster.map import encode_command, encode_current

    m = cluster(2)
    uuid = create(m, "v", 1, 2)
    vol = ready(m, uuid, 1, 2)
    args = _planned_move(m, uuid)
    m.report(1, replicas={uuid: {"state": "in-sync", "epoch": 1}})  # restarted: not handed off
    m.i += 1
    out = m.m.apply(m.i, encode_command("volume_failover", args, 2))
    assert out["error"]["field"] == "planned" and "no longer reports" in out["error"]["message"]
    assert (vol["primary"], vol["epoch"]) == (1, 1), "nothing changed"
    m.report(1, replicas={uuid: {"state": "in-sync", "epoch": 1, "handed_off": 1}})  # handed off again
    m.i += 1
    assert m.m.apply(m.i, encode_command("volume_failover", args, 2))["result"]["primary"] == 2
    # The leader proposes v2 only once every member knows level 7; below it, v1 (the old rule).
    assert features.version_for({"feature_level": 6}, "volume_failover") == 1
    assert features.version_for({"feature_level": 7}, "volume_failover") == 2
    assert features.version_for({}, "upgrade_step") == 1 and features.version_for({}, "node_health") == 1
    assert encode_current({"feature_level": 7}, "volume_failover", args) == encode_command(
        "volume_failover", args, 2
    )


def test_v1_of_a_planned_move_keeps_its_rule_for_clusters_below_level_7() -> None:
    """Members of 0.6 apply v1 as they always did: the maps of a mixed cluster stay equal."""
    from nodeos.cluster.map import encode_command

    m = cluster(2)
    uuid = create(m, "v", 1, 2)
    vol = ready(m, uuid, 1, 2)
    args = _planned_move(m, uuid)
    m.report(1, replicas={uuid: {"state": "in-sync", "epoch": 1}})
    m.i += 1
    assert m.m.apply(m.i, encode_command("volume_failover", args, 1))["result"]["primary"] == 2
    assert (vol["primary"], vol["epoch"]) == (2, 2)
