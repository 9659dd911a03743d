"""`nodeos node drain/undrain` ask again while the cluster answers `not_leader` (nothing was
done), for a bounded time, as an operator would re-run the command; other errors go through."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodeos.cluster.errors import NotLeader
from nodeos.errors import NotFound, error_from_dict
from nodeos.rpc.client import retry_not_leader


class Clock:
    """Time that moves only when slept."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def answers(*outcomes: object) -> Callable[[], object]:
    """A call that raises or returns each outcome in turn."""
    left = list(outcomes)

    def call() -> object:
        out = left.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    return call


def not_leader() -> Exception:
    # As the console's client rebuilds it from the daemon's answer.
    return error_from_dict({"code": "not_leader", "message": "no leader could take the request within 15 s"})


def test_a_drain_refused_by_a_starved_leader_is_asked_again_until_it_is_taken() -> None:
    clock = Clock()
    out = retry_not_leader(answers(not_leader(), not_leader(), {"node": "s1"}), 120, clock, clock.sleep)
    assert out == {"node": "s1"}
    assert 0 < clock.now <= 5


def test_not_leader_past_the_bound_reaches_the_operator() -> None:
    clock = Clock()
    with pytest.raises(Exception) as err:
        retry_not_leader(answers(*[not_leader()] * 1000), 10, clock, clock.sleep)
    assert getattr(err.value, "code", None) == "not_leader"
    assert 10 <= clock.now <= 12


def test_other_errors_are_not_retried() -> None:
    clock = Clock()
    with pytest.raises(NotFound):
        retry_not_leader(
            answers(NotFound("node 'sx' is not a member", field="node"), {}), 120, clock, clock.sleep
        )
    assert clock.now == 0
    with pytest.raises(NotLeader):  # the cluster's own class is caught like the rebuilt one
        retry_not_leader(answers(NotLeader("x")), 0, clock, clock.sleep)
