"""The primary's write freezes for snapshots of replicated volumes (pure decisions)."""

from __future__ import annotations

from typing import Any

from nodeos.agent.freeze import (
    FREEZE_ABORT_S,
    FREEZE_HARD_S,
    TAKEN_ABORT_S,
    TAKEN_HARD_S,
    Action,
    Held,
    decide,
    wanted,
)


def st_with(freeze: str | None, snap_state: str = "creating", primary: int = 1) -> dict[str, Any]:
    snaps = {"s-1": {"uuid": "s-1", "state": snap_state}} if freeze else {}
    return {"volumes": {"u-v": {"uuid": "u-v", "freeze": freeze, "primary": primary}}, "snapshots": snaps}


PRIMARY_REC = {"v": {"name": "v", "uuid": "u-v", "role": "primary", "state": "ready"}}


def test_only_the_primary_freezes_and_only_for_a_snapshot_being_taken() -> None:
    assert wanted(st_with("s-1"), 1, PRIMARY_REC) == {"u-v": "s-1"}
    assert wanted(st_with("s-1", primary=2), 1, PRIMARY_REC) == {}
    assert wanted(st_with("s-1", snap_state="ready"), 1, PRIMARY_REC) == {}
    assert wanted(st_with(None), 1, PRIMARY_REC) == {}
    secondary = {"v": dict(PRIMARY_REC["v"], role="secondary")}
    assert wanted(st_with("s-1"), 1, secondary) == {}


def test_freeze_when_asked_thaw_when_the_map_lets_go() -> None:
    assert decide({"u-v": "s-1"}, {}, set(), set(), 0.0) == [Action("freeze", "u-v", "s-1")]
    held = {"u-v": Held("s-1", 0.0)}
    assert decide({"u-v": "s-1"}, held, set(), set(), 1.0) == []
    assert decide({}, held, set(), set(), 1.0) == [Action("thaw", "u-v", "s-1")]
    # another snapshot now: the old freeze goes first (the next pass freezes for the new one)
    assert decide({"u-v": "s-2"}, held, set(), set(), 1.0) == [Action("thaw", "u-v", "s-1")]


def test_a_long_freeze_is_aborted_then_let_go_even_without_the_map() -> None:
    held = {"u-v": Held("s-1", 100.0)}
    assert decide({"u-v": "s-1"}, held, set(), set(), 100.0 + FREEZE_ABORT_S) == [
        Action("abort", "u-v", "s-1")
    ]
    assert decide({"u-v": "s-1"}, held, set(), set(), 100.0 + FREEZE_HARD_S) == [
        Action("expire", "u-v", "s-1")
    ]
    # once expired, the same snapshot is never frozen again
    assert decide({"u-v": "s-1"}, {}, set(), {"s-1"}, 200.0) == []


def test_after_a_one_step_snapshot_the_map_gets_longer_than_held_writes_would() -> None:
    """Every leg taken and the writes let go: only the map's reports are waited for, which under
    load take longer than the 10 s meant for held writes (the lab, TCG: agent passes of 26 s)."""
    held = {"u-v": Held("s-1", 100.0, thawed=True)}
    assert decide({"u-v": "s-1"}, held, set(), set(), 100.0 + FREEZE_HARD_S) == []
    assert decide({"u-v": "s-1"}, held, set(), set(), 100.0 + TAKEN_ABORT_S) == [
        Action("abort", "u-v", "s-1")
    ]
    assert decide({"u-v": "s-1"}, held, set(), set(), 100.0 + TAKEN_HARD_S) == [
        Action("expire", "u-v", "s-1")
    ]
    assert decide({}, held, set(), set(), 101.0) == [Action("thaw", "u-v", "s-1")]  # settled: let go


def test_a_freeze_left_by_a_crashed_daemon_is_thawed_unless_the_map_still_wants_it() -> None:
    assert decide({}, {}, {"u-v"}, set(), 0.0) == [Action("thaw", "u-v")]
    assert decide({"u-v": "s-1"}, {}, {"u-v"}, set(), 0.0) == [Action("freeze", "u-v", "s-1")]
    assert decide({"u-v": "s-1"}, {}, {"u-v"}, {"s-1"}, 0.0) == [Action("thaw", "u-v")]
