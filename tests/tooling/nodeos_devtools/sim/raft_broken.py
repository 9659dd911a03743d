"""Deliberately broken Raft variants for the safety invariants that had none (invariants.py):
each binds, on one node's `Raft` instance, the real method with one rule left out, so the Raft
code itself keeps no test flag. For the simulator's self-test only (tests/sim/test_sim.py).
"""

from __future__ import annotations

import types
from typing import Any

from nodeos.cluster.raft.log import RaftLog
from nodeos.cluster.raft.raft import Raft
from nodeos.cluster.raft.read_only import ReadIndexStatus
from nodeos.cluster.raft.types import Message
from nodeos.cluster.raft.types import MessageType as MT

RAFT_BROKEN_VARIANTS = {
    "vote_twice": "a voter that already voted in a term grants another candidate its vote too",
    "append_skips_prev_check": "an append is accepted without checking the previous entry's term",
    "apply_uncommitted": "entries are handed to the state machine before they are committed",
    "read_without_quorum": "a ReadIndex is answered at once, without a quorum confirming the leadership",
}


def _vote_twice(self: Raft, m: Message) -> None:
    if m.type is MT.VOTE and m.term == self.term and self.vote not in (0, m.frm):
        self.vote = 0  # forgets the vote it cast this term
        self.lead = 0
    Raft.step(self, m)


def _maybe_append_no_prev(
    self: RaftLog, index: int, log_term: int, committed: int, ents: tuple[Any, ...]
) -> int | None:
    # The previous entry must exist (else the append would leave a gap), but its term is not
    # compared: a follower keeps a different history below what it appends.
    if index > self.last_index():
        return None
    last_new = index + len(ents)
    ci = self.find_conflict(ents)
    if ci and ci > self.committed:
        self.append(list(ents[ci - index - 1 :]))
    self.commit_to(min(committed, last_new))
    return last_new


def _next_uncommitted(self: RaftLog) -> list[Any]:
    if self.has_pending_snapshot():
        return []
    lo = max(self.applying + 1, self.first_index())
    hi = self.last_index() + 1  # not committed + 1
    return self.slice(lo, hi, self.max_applying_size) if lo < hi else []


def _has_next_uncommitted(self: RaftLog) -> bool:
    return not self.has_pending_snapshot() and self.last_index() > max(self.applying, self.first_index() - 1)


def _applied_anyway(self: RaftLog, i: int) -> None:
    if i:
        self.applied = max(self.applied, min(i, self.committed))
        self.applying = max(self.applying, i)


def _read_at_once(self: Raft, m: Message) -> None:
    if not self._committed_entry_in_current_term():
        self.pending_read_index_messages.append(m)
        return
    self._respond_read_index(ReadIndexStatus(m, self.log.committed))  # no heartbeat round


def break_raft(raft: Raft, variant: str) -> None:
    if variant == "vote_twice":
        raft.step = types.MethodType(_vote_twice, raft)  # type: ignore[method-assign]
    elif variant == "append_skips_prev_check":
        raft.log.maybe_append = types.MethodType(_maybe_append_no_prev, raft.log)  # type: ignore[method-assign]
    elif variant == "apply_uncommitted":
        log = raft.log
        log.next_committed_ents = types.MethodType(_next_uncommitted, log)  # type: ignore[method-assign]
        log.has_next_committed_ents = types.MethodType(_has_next_uncommitted, log)  # type: ignore[method-assign]
        log.applied_to = types.MethodType(_applied_anyway, log)  # type: ignore[method-assign]
    elif variant == "read_without_quorum":
        raft._leader_read_index = types.MethodType(_read_at_once, raft)  # type: ignore[method-assign]
