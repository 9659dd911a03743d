"""The event log: record shape, bounds, the map command, and what an operator reads."""

from __future__ import annotations

import pytest

from nodeos.cluster import events as map_events
from nodeos.cluster import map as cmap
from nodeos.errors import BadInput
from nodeos.observe import events as ev


def test_bad_events_name_the_field_and_allowed_values() -> None:
    with pytest.raises(BadInput) as e:
        ev.make_event("volcano", "boom")
    assert e.value.field == "kind" and "failover" in e.value.allowed
    with pytest.raises(BadInput) as e:
        ev.make_event("failover", "x", severity="fatal")
    assert e.value.field == "severity"
    with pytest.raises(BadInput) as e:
        ev.check_event({"kind": "failover", "message": "x", "at": 1.0, "secret": "DHHC-1:..."})
    assert e.value.field == "event"  # unknown keys are refused, so nothing rides along by accident
    with pytest.raises(BadInput) as e:
        ev.make_event("failover", "x", epoch=True)
    assert e.value.field == "epoch"
    with pytest.raises(BadInput) as e:
        ev.check_since(-1)
    assert e.value.field == "since"


def test_ring_keeps_the_newest_and_since_reads_after_a_cursor() -> None:
    ring = ev.EventRing(keep=3)
    for i in range(5):
        ring.add(ev.make_event("leader_changed", f"leader {i}", at=100.0 + i, node=i))
    assert [e["seq"] for e in ring.since(0)] == [3, 4, 5]
    assert [e["node"] for e in ring.since(4)] == [4]
    assert ring.since(5) == [] and ring.last_seq == 5


def test_text_line_and_journal_fields() -> None:
    e = {
        **ev.make_event(
            "failover", "volume v1: primary 1 -> 2", severity="warning", at=0.0, volume="u1", epoch=7
        ),
        "seq": 9,
    }
    line = ev.format_line(e)
    assert "#9" in line and "failover: volume v1: primary 1 -> 2" in line and "epoch=7" in line
    assert ev.journal_fields(e) == {
        "event_kind": "failover",
        "event_severity": "warning",
        "event_seq": 9,
        "volume": "u1",
        "epoch": 7,
    }


def test_record_event_in_the_map_is_numbered_and_bounded_identically_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = cmap.ClusterMap(), cmap.ClusterMap()
    monkeypatch.setattr(map_events, "MAX_EVENTS", 4)
    cmds = [
        cmap.encode_command(
            "record_event", ev.make_event("node_failed", f"node {i} lost", at=float(i), node=i)
        )
        for i in range(6)
    ]
    cmds.insert(2, cmap.encode_command("record_event", {"kind": "nope", "message": "x", "at": 1.0}))
    for i, c in enumerate(cmds, start=1):
        ra, rb = a.apply(i, c), b.apply(i, c)
        assert ra == rb
    assert a.snapshot() == b.snapshot()
    kept = map_events.list_events(a.state)
    assert [e["seq"] for e in kept] == [3, 4, 5, 6] and [e["node"] for e in kept] == [2, 3, 4, 5]
    assert a.state["rejected"][-1]["error"]["field"] == "kind"  # the bad one changed nothing
    assert map_events.list_events(a.state, since=5)[0]["message"] == "node 5 lost"


def test_the_proposer_cannot_choose_the_seq() -> None:
    m = cmap.ClusterMap()
    r = m.apply(
        1, cmap.encode_command("record_event", {**ev.make_event("node_failed", "x", at=1.0), "seq": 99})
    )
    assert r["error"]["field"] == "seq"
    assert map_events.list_events(m.state) == []


def test_a_state_without_the_section_lists_nothing() -> None:
    st = cmap.ClusterMap().state
    del st[map_events.SECTION]
    assert map_events.list_events(st) == [] and map_events.last_seq(st) == 0
    assert not map_events.has_section(st)


def _flap(kind: str, i: int) -> dict:
    return ev.make_event(kind, f"{kind} {i}", at=float(i), node=3)


def test_a_flapping_source_is_held_back_and_the_log_ends_in_its_real_state() -> None:
    lim = ev.RateLimit(burst=2, window_s=60.0)
    out = []
    for i in range(6):  # failed, recovered, failed, recovered, failed, recovered ... within 6 s
        e = lim.offer("node:3", _flap("node_failed" if i % 2 == 0 else "node_recovered", i), float(i))
        out.append(e)
    assert [e["kind"] if e else None for e in out] == ["node_failed", "node_recovered", *[None] * 4]
    assert lim.offer("drift:1", _flap("drift_found", 0), 5.0) is not None  # other sources unaffected
    assert lim.flush(30.0) == []  # still over the rate
    late = lim.flush(61.0)
    # The last word was "recovered", as was the last event let through: nothing to add.
    assert late == []
    lim.offer("node:3", _flap("node_failed", 7), 62.0)
    lim.offer("node:3", _flap("node_recovered", 8), 62.5)
    lim.offer("node:3", _flap("node_failed", 9), 63.0)  # held: the node stays failed
    held = lim.flush(130.0)
    assert [(e["kind"], e["message"]) for e in held] == [("node_failed", "node_failed 9")]
    assert lim.offer("node:3", _flap("node_recovered", 10), 131.0) is not None  # 2 sent since 71 s
    lim.offer("node:3", _flap("node_failed", 11), 132.0)
    lim.offer("node:3", _flap("node_recovered", 12), 133.0)
    e = lim.offer("node:3", _flap("node_failed", 13), 200.0)
    assert e is not None and e["message"] == "node_failed 13 (2 similar event(s) held back)"
