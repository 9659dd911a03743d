"""The old primary's side of a planned move: once the failover went through it stays fenced
until it has demoted itself; only a handoff the map withdrew (still primary there) is lifted."""

from __future__ import annotations

from typing import Any

from nodeos.agent.handoff import still_fenced, wanted


def state(primary: int, epoch: int, handoff: dict[str, int] | None) -> dict[str, Any]:
    return {"volumes": {"u": {"uuid": "u", "primary": primary, "epoch": epoch, "handoff": handoff}}}


def rec(role: str, epoch: int = 1) -> dict[str, dict[str, Any]]:
    return {"v": {"uuid": "u", "name": "v", "role": role, "state": "ready", "epoch": epoch}}


def test_a_handed_off_primary_stays_fenced_after_the_failover_until_it_demoted() -> None:
    asked = state(primary=1, epoch=1, handoff={"to": 2, "epoch": 1})
    assert wanted(asked, 1, rec("primary")) == {"u": 1}
    moved = state(primary=2, epoch=2, handoff=None)  # the failover applied, not yet demoted here
    assert wanted(moved, 1, rec("primary")) == {}
    assert still_fenced(moved, 1, rec("primary"), "u")
    assert not still_fenced(moved, 1, rec("secondary", 2), "u")  # demoted: nothing left to fence


def test_a_withdrawn_handoff_is_lifted() -> None:
    withdrawn = state(primary=1, epoch=1, handoff=None)  # undrain before the failover
    assert wanted(withdrawn, 1, rec("primary")) == {}
    assert not still_fenced(withdrawn, 1, rec("primary"), "u")
    assert not still_fenced({"volumes": {}}, 1, rec("primary"), "u")  # the volume is gone
