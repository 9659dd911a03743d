"""Deliberately broken variants of the voter set's rules (nodeos/cluster/voters.py), for the
self-test of the voters workload's invariants (voters_sim.py) only: each is the real code with
one rule changed, patched in for one run. Production code never sets these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from nodeos.cluster import voters

VOTERS_BROKEN_VARIANTS = {
    "promote_any_learner": "the leader promotes the first learner it finds, whatever its domain or catch-up",
    "remove_before_add": "a lost voter is demoted before its replacement is promoted",
}

_ORIGINAL = {"best_candidate": voters._View.best_candidate, "decide": voters._decide}


def _any_learner(self: voters._View, keep: object) -> voters.Member | None:
    learners = [m for m in self.by_id.values() if not m.voter]
    return min(learners, key=lambda m: m.node_id) if learners else None


def _remove_first(v: voters._View) -> voters.Change | None:
    if v.lost:  # the rule-2 demotion, taken before rule 1's promotion
        victim = max(v.lost, key=lambda n: (v.by_id[n].draining is False, v.by_id[n].silent_s, n))
        return voters._demote_or_transfer(v, victim, "lost (demoted first)")
    return _ORIGINAL["decide"](v)  # type: ignore[operator]


@contextlib.contextmanager
def voters_bug(variant: str | None) -> Iterator[None]:
    """Patch `variant` into the real rules for the block."""
    try:
        if variant == "promote_any_learner":
            voters._View.best_candidate = _any_learner  # type: ignore[method-assign,assignment]
        elif variant == "remove_before_add":
            voters._decide = _remove_first
        yield
    finally:
        voters._View.best_candidate = _ORIGINAL["best_candidate"]  # type: ignore[method-assign]
        voters._decide = _ORIGINAL["decide"]  # type: ignore[assignment]
