"""The leader's view of the membership: voters, learners, per-peer progress, votes."""

from __future__ import annotations

from . import quorum
from .progress import Progress
from .types import ConfChange, ConfChangeType, ConfState


class ProgressTracker:
    def __init__(self, max_inflight: int) -> None:
        self.max_inflight = max_inflight
        self.voters: set[int] = set()
        self.learners: set[int] = set()
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}

    def conf_state(self) -> ConfState:
        return ConfState(tuple(sorted(self.voters)), tuple(sorted(self.learners)))

    def reset_conf(self, cs: ConfState, next_index: int) -> None:
        self.voters = set(cs.voters)
        self.learners = set(cs.learners) - self.voters
        self.progress = {}
        for nid in self.voters | self.learners:
            self.progress[nid] = Progress(next_index, self.max_inflight, is_learner=nid in self.learners)
        self.votes = {}

    def apply_conf_change(self, cc: ConfChange, next_index: int) -> None:
        """Single-server change; the caller guarantees only one is in flight."""
        nid = cc.node_id
        if cc.type is ConfChangeType.ADD_VOTER:
            self.learners.discard(nid)
            self.voters.add(nid)
        elif cc.type is ConfChangeType.ADD_LEARNER:
            self.voters.discard(nid)
            self.learners.add(nid)
        else:
            self.voters.discard(nid)
            self.learners.discard(nid)
            self.progress.pop(nid, None)
            return
        pr = self.progress.get(nid)
        if pr is None:
            pr = Progress(next_index, self.max_inflight)
            # A new peer gets an election timeout of grace before check-quorum counts it.
            pr.recent_active = True
            self.progress[nid] = pr
        pr.is_learner = nid in self.learners

    def is_singleton(self) -> bool:
        return len(self.voters) == 1

    def committed(self) -> int:
        return quorum.committed_index(self.voters, lambda v: self.progress[v].match)

    def reset_votes(self) -> None:
        self.votes = {}

    def record_vote(self, nid: int, granted: bool) -> None:
        self.votes.setdefault(nid, granted)

    def tally_votes(self) -> tuple[int, int, quorum.VoteResult]:
        granted = sum(1 for v in self.voters if self.votes.get(v) is True)
        rejected = sum(1 for v in self.voters if self.votes.get(v) is False)
        return granted, rejected, quorum.vote_result(self.voters, self.votes)

    def quorum_active(self, self_id: int) -> bool:
        votes = {v: (v == self_id or self.progress[v].recent_active) for v in self.voters}
        return quorum.vote_result(self.voters, votes) is quorum.VoteResult.WON
