"""Leases across three real nodeosd processes: a member that stops answering (SIGSTOP) is
called down by the leader once its lease ran out (at once: its Raft member is silent too, so
it is not merely suspect), seen from any node's console and in the
event log, and up again once it renews steadily; live members are never called down, also
not by a leader that has just taken over (it waits out a whole lease first)."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from nodeos.storage.failover import DEFAULT_LEASE_S, LeaseTiming

from .test_cluster_events import events, wait_event
from .test_cluster_membership import nodes as nodes  # the fixture
from .test_cluster_membership import wait_status
from .test_control_plane import run, three

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]
T = LeaseTiming(DEFAULT_LEASE_S)


def lease_of(node: Any, name: str) -> str:
    rc, rows = run(node, "node", "list")
    assert rc == 0, rows
    return next(r["lease"] for r in rows if r["name"] == name)


def test_a_stopped_member_goes_down_after_its_lease_and_up_once_it_renews(nodes: Any) -> None:
    ns = three(nodes)
    leader_id = wait_status(ns[0], lambda s: s["leader"] is not None)["leader"]
    victim, reader = [n for n in ns if n.raft_id != leader_id][:2]
    rc, st = run(victim, "status")
    assert rc == 0 and st["control"]["lease"]["valid"] is True, st
    start = events(reader)[-1]["seq"]
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGSTOP)
    stopped, stopped_at = time.monotonic(), time.time()
    try:
        down = wait_event(
            reader,
            lambda e: e["kind"] == "node_down" and e["node"] == victim.raft_id and e["seq"] > start,
            30,
        )
        took = time.monotonic() - stopped
        assert took >= T.lease_s, f"called down {took:.1f} s after it stopped: before its lease ran out"
        assert down["severity"] == "critical" and "no lease renewal" in down["reason"]
        # Its Raft member is stopped too: not a slow node but a dead one, called down as its
        # lease runs out, never suspect first (docs/cluster.md: lease x 1.1 + 0.2 s after its
        # last renewal; a slow node's bound, one lease later, is the ceiling).
        assert "still answers" not in down["reason"], down
        assert down["at"] - stopped_at < T.down_after_s + T.suspect_grace_s, down
        since = [e for e in events(reader) if e["seq"] > start and e.get("node") == victim.raft_id]
        assert "node_suspect" not in [e["kind"] for e in since], since
        assert lease_of(reader, f"n{victim.raft_id}") == "down"
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    up = wait_event(reader, lambda e: e["kind"] == "node_up" and e["node"] == victim.raft_id, 60)
    assert up["seq"] > down["seq"]
    assert lease_of(reader, f"n{victim.raft_id}") == "up"
    rc, st = run(victim, "status")
    assert rc == 0 and st["control"]["lease"]["valid"] is True, st
    # Nobody else was ever called down.
    assert [e["node"] for e in events(reader) if e["kind"] == "node_down"] == [victim.raft_id]


def test_a_new_leader_calls_no_live_member_down(nodes: Any) -> None:
    ns = three(nodes)
    old_id = wait_status(ns[0], lambda s: s["leader"] is not None)["leader"]
    old = next(n for n in ns if n.raft_id == old_id)
    rest = [n for n in ns if n is not old]
    start = events(rest[0])[-1]["seq"]
    old.kill()
    down = wait_event(rest[0], lambda e: e["kind"] == "node_down" and e["seq"] > start, 60)
    assert down["node"] == old_id
    # Two more leases: the live members renew with the new leader and stay up.
    time.sleep(2 * T.down_after_s)
    kinds = [(e["kind"], e.get("node")) for e in events(rest[1]) if e["seq"] > start]
    assert [k for k in kinds if k[0] == "node_down"] == [("node_down", old_id)], kinds
    assert {lease_of(rest[1], f"n{n.raft_id}") for n in rest} == {"up"}


def test_drain_and_rebuild_limit_refuse_bad_input_naming_the_field_and_change_nothing(nodes: Any) -> None:
    ns = three(nodes)
    rc, before = run(ns[1], "node", "list")
    assert rc == 0
    for args, field in (
        (("node", "drain", "nosuch", "--no-wait"), "node"),
        (("node", "undrain", "nosuch"), "node"),
        (("node", "rebuild-limit", "n2", "fast"), "rebuild_mbps"),
        (("node", "rebuild-limit", "n2", "0"), "rebuild_mbps"),
        (("node", "rebuild-limit", "n2", "1000000"), "rebuild_mbps"),
    ):
        rc, out = run(ns[1], *args)
        assert rc == 2, (args, out)
        assert out["error"]["field"] == field, (args, out)
    rc, after = run(ns[1], "node", "list")

    def kept(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["name"], r["state"], r.get("rebuild_mbps")) for r in rows]

    assert kept(after) == kept(before)
    rc, out = run(ns[1], "node", "rebuild-limit", "n2", "50")
    assert rc == 0, out
    shown = next(r for r in run(ns[0], "node", "list")[1] if r["name"] == "n2")
    assert shown["rebuild_mbps"] == 50
