"""Which steps of a plan the agent runs together (issue 11): consecutive volume creates only, in
the plan's order, at most MAX_CREATES_TOGETHER at once."""

from __future__ import annotations

from nodeos.agent.agent import MAX_CREATES_TOGETHER, batches
from nodeos.agent.plan import Step


def _names(groups: list[list[Step]]) -> list[list[str]]:
    return [[s.name for s in g] for g in groups]


def test_consecutive_creates_go_together_and_the_plans_order_is_kept() -> None:
    steps = [
        Step("volume.delete", "d1"),
        Step("volume.create", "a"),
        Step("volume.create", "b"),
        Step("volume.clone", "c", {"snap_id": "s"}),  # its own step: a clone, not a create
        Step("volume.create", "e"),
        Step("volume.snapshot", "f"),
        Step("volume.create", "g"),
        Step("volume.create", "h"),
    ]
    assert _names(batches(steps)) == [["d1"], ["a", "b"], ["c"], ["e"], ["f"], ["g", "h"]]


def test_other_steps_never_go_together() -> None:
    steps = [
        Step(op, f"x{i}")
        for i, op in enumerate(["pool.create", "pool.create", "volume.grant", "volume.grant"])
    ]
    assert _names(batches(steps)) == [["x0"], ["x1"], ["x2"], ["x3"]]


def test_a_long_run_of_creates_is_cut_at_the_window() -> None:
    steps = [Step("volume.create", f"v{i}") for i in range(2 * MAX_CREATES_TOGETHER + 1)]
    assert [len(g) for g in batches(steps)] == [MAX_CREATES_TOGETHER, MAX_CREATES_TOGETHER, 1]
    assert [s for g in batches(steps) for s in g] == steps
