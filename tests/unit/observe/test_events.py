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


def _map_with_events(monkeypatch: pytest.MonkeyPatch) -> cmap.ClusterMap:
    handlers = dict(cmap.HANDLERS)
    map_events.register(handlers)
    monkeypatch.setattr(cmap, "HANDLERS", handlers)
    return cmap.ClusterMap()


def test_record_event_in_the_map_is_numbered_and_bounded_identically_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = _map_with_events(monkeypatch), _map_with_events(monkeypatch)
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


def test_the_proposer_cannot_choose_the_seq(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _map_with_events(monkeypatch)
    r = m.apply(
        1, cmap.encode_command("record_event", {**ev.make_event("node_failed", "x", at=1.0), "seq": 99})
    )
    assert r["error"]["field"] == "seq"
    assert map_events.list_events(m.state) == []


def test_a_map_without_the_section_lists_nothing() -> None:
    assert map_events.list_events(cmap.ClusterMap().state) == []
    assert not map_events.has_section(cmap.ClusterMap().state)
