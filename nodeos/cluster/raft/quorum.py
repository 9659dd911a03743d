"""Majority quorum arithmetic over a set of voters (single-server membership changes only)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping


class VoteResult(enum.Enum):
    PENDING = "pending"
    LOST = "lost"
    WON = "won"


def committed_index(voters: Collection[int], match: Callable[[int], int]) -> int:
    """Largest index that a majority of voters has: the commit candidate."""
    if not voters:
        return 0  # no voters, nothing can be committed by counting
    idx = sorted((match(v) for v in voters), reverse=True)
    return idx[len(idx) // 2]


def vote_result(voters: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    if not voters:
        return VoteResult.WON  # matches etcd: an empty config wins (never used for elections)
    granted = sum(1 for v in voters if votes.get(v) is True)
    missing = sum(1 for v in voters if v not in votes)
    q = len(voters) // 2 + 1
    if granted >= q:
        return VoteResult.WON
    if granted + missing >= q:
        return VoteResult.PENDING
    return VoteResult.LOST
