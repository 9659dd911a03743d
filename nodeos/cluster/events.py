"""The `events` section of the replicated cluster map and its `record_event` command.

Kept out of map.py so the map's owner wires it in with two lines (see `register`):

    from nodeos.cluster import events as map_events
    map_events.register(HANDLERS)            # after HANDLERS is defined
    # and in _empty_state(): **map_events.empty_section()

The section is `{"events": {"log": [event, ...], "next_seq": int}}`: at most MAX_EVENTS
events (oldest dropped), each numbered by the map in commit order, so every node lists the
same events with the same numbers. The handler is pure like every map command: the event's
time comes from the proposer (`at`), never from the applying node's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodeos.errors import BadInput
from nodeos.observe import events as ev

MAX_EVENTS = 1000
SECTION = "events"

Handler = Callable[[dict[str, Any], dict[str, Any]], Any]


def empty_section() -> dict[str, Any]:
    return {SECTION: {"log": [], "next_seq": 1}}


def _section(st: dict[str, Any]) -> dict[str, Any]:
    # Maps restored from a snapshot taken before this section existed lack it.
    sec = st.get(SECTION)
    if not isinstance(sec, dict):
        sec = st[SECTION] = {"log": [], "next_seq": 1}
    return sec


def record_event_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Append one event; args are an event (see nodeos.observe.events) without `seq`."""
    if "seq" in args:
        # The map numbers events; a proposer choosing its own would break the one order.
        raise BadInput("seq is assigned by the map, not the proposer", field="seq")
    checked = ev.check_event(args)
    sec = _section(st)
    sec["next_seq"] = ev.append(sec["log"], int(sec["next_seq"]), checked, MAX_EVENTS)
    return {"seq": sec["next_seq"] - 1}


def register(handlers: dict[str, dict[int, Handler]]) -> None:
    """Add the `record_event` command to a map's command table."""
    handlers.setdefault("record_event", {})[1] = record_event_v1


def list_events(state: dict[str, Any], since: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
    """Events of a map state with seq > since (empty when the map has no events section yet)."""
    sec = state.get(SECTION)
    if not isinstance(sec, dict):
        return []
    return ev.after(sec.get("log") or [], since, limit)


def has_section(state: dict[str, Any]) -> bool:
    return isinstance(state.get(SECTION), dict)
