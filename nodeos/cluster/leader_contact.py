"""When this member last took part in an older leader's quorum (pure; issue 29).

A lease grant follows a read barrier (nodeos/control/failover_loop.py): a quorum of voters
acknowledged a heartbeat the leader sent after the renewal request arrived, and the node counts
its lease from before it sent that request. So every grant of a leader of term < T was sent
before the moment some voter of any majority last received a leader message of a term < T (or,
when that voter is the old leader itself, last acted as leader). A new leader of term T that
learns this moment from a majority of voters -- each answering only once its own term is T or
more, so it acknowledges no older leader afterwards -- may count every lease from the latest of
those moments instead of from its own election, which comes one election timeout later at least.
Without a restart in between, a member knows these moments; across one it answers its own
start, which bounds every message its previous life received.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeos.cluster.raft.types import MessageType

# Messages only a leader sends: a member that takes one acknowledges that leader's barriers.
LEADER_MESSAGES = frozenset({MessageType.APP, MessageType.HEARTBEAT, MessageType.SNAP})
KEEP_TERMS = 8  # older terms are folded into one moment: only "the latest before T" is asked


@dataclass
class LeaderContact:
    started: float  # this process's start (monotonic): bounds what a previous life received
    moments: dict[int, float] = field(default_factory=dict)  # term -> last leader message / leading
    folded: float = float("-inf")  # the latest moment of terms dropped from `moments`

    def note(self, term: int, now: float) -> None:
        """A leader message (append, heartbeat, snapshot) of `term` arrived, or this member led in
        `term`, at `now`."""
        if now > self.moments.get(term, float("-inf")):
            self.moments[term] = now
        while len(self.moments) > KEEP_TERMS:
            old = min(self.moments)
            self.folded = max(self.folded, self.moments.pop(old))

    def last_before(self, term: int) -> float:
        """The latest moment this member may have acknowledged a leader of a term below `term`."""
        older = [t for k, t in self.moments.items() if k < term]
        return max([self.started, self.folded, *older])


def lease_floor(answers: dict[int, float], voters: tuple[int, ...] | list[int]) -> float | None:
    """From the voters' answers (voter -> its `last_before(T)` on the new leader's clock), the
    moment every older leader's grant was sent before: the latest moment of some majority, the
    majority whose latest moment is earliest. None until a majority answered."""
    need = len(voters) // 2 + 1
    got = sorted(t for v, t in answers.items() if v in voters)
    if not voters or len(got) < need:
        return None
    return got[need - 1]
