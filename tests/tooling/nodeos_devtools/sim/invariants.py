"""Safety invariants checked by the simulator after every event (paper Figure 3).

- election safety: at most one leader per term;
- log matching: an (index, term) pair names one entry, with one predecessor term
  (by induction, two logs sharing an entry share the whole prefix);
- leader completeness: a new leader's log holds every entry committed in an earlier term (one
  committed in its own term or a later one need not be there: a candidate of an old term can
  still win with a vote that was delayed while a newer leader committed; it can commit nothing,
  as every node that answers it is past its term);
- commit rule (5.4.2, Figure 8): a leader only moves its commit index by counting
  replicas of an entry of its own term;
- state-machine safety: every node applies the same entry at a given index;
- no acknowledged command lost, and no read misses a write acknowledged before it began.
"""

from __future__ import annotations

from nodeos.cluster.raft import Entry, Snapshot
from nodeos.cluster.raft.raft import Raft


class Violation(Exception):
    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> leader id
        self.entries: dict[
            tuple[int, int], tuple[int, bytes, int]
        ] = {}  # (index, term) -> (type, data, prev term)
        self.committed: dict[int, int] = {}  # index -> term of the committed entry
        self.commit_term: dict[int, int] = {}  # index -> the earliest term in which it was committed
        self.applied: dict[int, tuple[int, bytes]] = {}  # index -> (term, data) applied by anyone
        self.acked: list[bytes] = []  # commands acknowledged to clients, in order
        self.acked_index: dict[bytes, int] = {}

    def leader_elected(self, node_id: int, raft: Raft) -> bool:
        """Returns True when this (term, node) is a new leadership."""
        prev = self.leaders.get(raft.term)
        if prev == node_id:
            return False
        if prev is not None:
            raise Violation("election safety", f"term {raft.term} has two leaders: {prev} and {node_id}")
        self.leaders[raft.term] = node_id
        floor = raft.log.first_index() - 1  # older entries are inside the leader's snapshot
        last = raft.log.last_index()
        for index, term in self.committed.items():
            if index < floor or self.commit_term[index] >= raft.term:
                continue
            if index > last or raft.log.zero_term_on_err(index) != term:
                raise Violation(
                    "leader completeness",
                    f"node {node_id} became leader of term {raft.term} without committed entry "
                    f"{index} (term {term}); its last index is {last}",
                )
        return True

    def persisted(self, node_id: int, ents: list[Entry], prev_term_of: dict[int, int]) -> None:
        for e in ents:
            key = (e.index, e.term)
            rec = (int(e.type), e.data, prev_term_of[e.index - 1])
            old = self.entries.get(key)
            if old is None:
                self.entries[key] = rec
            elif old != rec:
                raise Violation(
                    "log matching",
                    f"node {node_id} stored entry {e.index} of term {e.term} as {rec!r}, "
                    f"another node stored {old!r}",
                )

    def leader_counted(self, node_id: int, raft: Raft, new: int) -> None:
        term = raft.log.zero_term_on_err(new)
        if term != raft.term:
            raise Violation(
                "commit rule",
                f"leader n{node_id} of term {raft.term} committed index {new} of term {term} by counting",
            )

    def commit_advanced(self, node_id: int, raft: Raft, old: int, new: int) -> None:
        for i in range(max(old + 1, raft.log.first_index() - 1), new + 1):
            t = raft.log.zero_term_on_err(i)
            if t == 0:
                continue
            prev = self.committed.get(i)
            # The node's term when it saw the commit: the committing leader's own term the first
            # time (a leader commits before any follower hears of it), a later one afterwards.
            self.commit_term[i] = min(self.commit_term.get(i, raft.term), raft.term)
            if prev is None:
                self.committed[i] = t
            elif prev != t:
                raise Violation(
                    "state-machine safety",
                    f"node {node_id} committed index {i} with term {t}, earlier committed with term {prev}",
                )

    def applied_entry(self, node_id: int, e: Entry) -> None:
        prev = self.applied.get(e.index)
        rec = (e.term, e.data)
        if prev is None:
            self.applied[e.index] = rec
        elif prev != rec:
            raise Violation(
                "state-machine safety",
                f"node {node_id} applied {rec!r} at index {e.index}, another node applied {prev!r}",
            )

    def snapshot_restored(self, node_id: int, snap: Snapshot, state: list[tuple[int, bytes]]) -> None:
        for index, data in state:
            prev = self.applied.get(index)
            if prev is not None and prev[1] != data:
                raise Violation(
                    "state-machine safety",
                    f"node {node_id} restored a snapshot with {data!r} at {index}, "
                    f"applied elsewhere: {prev!r}",
                )

    def ack(self, cmd: bytes, index: int) -> None:
        if cmd not in self.acked_index:
            self.acked.append(cmd)
            self.acked_index[cmd] = index

    def read_done(self, node_id: int, ctx: bytes, issued_acked: int, state_set: set[bytes]) -> None:
        for cmd in self.acked[:issued_acked]:
            if cmd not in state_set:
                raise Violation(
                    "linearizable read",
                    f"read {ctx!r} at node {node_id} misses {cmd!r}, acknowledged before the read began",
                )

    def final_state(self, node_id: int, state_set: set[bytes]) -> None:
        for cmd in self.acked:
            if cmd not in state_set:
                raise Violation(
                    "acknowledged command lost",
                    f"{cmd!r} (acknowledged at index {self.acked_index[cmd]}) is missing from "
                    f"node {node_id}'s state after the cluster healed",
                )
