"""The Raft log: stable storage plus the unstable tail, with commit and apply indexes."""

from __future__ import annotations

from .log_unstable import Unstable
from .storage import Storage, limit_size
from .types import CompactedError, Entry, Snapshot, UnavailableError


class RaftLog:
    def __init__(self, storage: Storage, max_applying_size: int) -> None:
        self.storage = storage
        self.max_applying_size = max_applying_size
        first = storage.first_index()
        last = storage.last_index()
        self.unstable = Unstable(last + 1)
        self.committed = first - 1
        self.applied = first - 1
        # Handed to the application in a Ready but not yet acknowledged by advance().
        self.applying = first - 1

    def __repr__(self) -> str:
        return (
            f"RaftLog(committed={self.committed}, applied={self.applied}, "
            f"unstable.offset={self.unstable.offset}, len(unstable)={len(self.unstable.entries)})"
        )

    # --- indexes and terms ---
    def first_index(self) -> int:
        i = self.unstable.maybe_first_index()
        return i if i is not None else self.storage.first_index()

    def last_index(self) -> int:
        i = self.unstable.maybe_last_index()
        return i if i is not None else self.storage.last_index()

    def term(self, i: int) -> int:
        """Raises CompactedError / UnavailableError outside [first_index()-1, last_index()]."""
        if i < self.first_index() - 1:
            raise CompactedError(f"index {i} is compacted")
        if i > self.last_index():
            raise UnavailableError(f"index {i} is past the last index {self.last_index()}")
        t = self.unstable.maybe_term(i)
        if t is not None:
            return t
        return self.storage.term(i)

    def zero_term_on_err(self, i: int) -> int:
        try:
            return self.term(i)
        except (CompactedError, UnavailableError):
            return 0

    def last_term(self) -> int:
        return self.term(self.last_index())

    def match_term(self, i: int, t: int) -> bool:
        try:
            return self.term(i) == t
        except (CompactedError, UnavailableError):
            return False

    def is_up_to_date(self, lasti: int, term: int) -> bool:
        """Is a candidate's log (last index, last term) at least as up to date as ours? (paper 5.4.1)"""
        lt = self.last_term()
        return term > lt or (term == lt and lasti >= self.last_index())

    # --- appending ---
    def maybe_append(self, index: int, log_term: int, committed: int, ents: tuple[Entry, ...]) -> int | None:
        """Follower side of AppendEntries. Returns the last new index, or None on mismatch."""
        if not self.match_term(index, log_term):
            return None
        last_new = index + len(ents)
        ci = self.find_conflict(ents)
        if ci:
            if ci <= self.committed:
                raise AssertionError(
                    f"entry {ci} conflicts with committed entry (committed {self.committed})"
                )
            self.append(list(ents[ci - index - 1 :]))
        self.commit_to(min(committed, last_new))
        return last_new

    def find_conflict(self, ents: tuple[Entry, ...] | list[Entry]) -> int:
        """First index whose term differs from ours (or that we lack); 0 if all match."""
        for e in ents:
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest (i, t) with i <= index and t <= term: a good next probe after a rejection."""
        while index > 0:
            try:
                t = self.term(index)
            except (CompactedError, UnavailableError):
                return index, 0
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    def append(self, ents: list[Entry]) -> int:
        if not ents:
            return self.last_index()
        if ents[0].index - 1 < self.committed:
            raise AssertionError(f"append after {ents[0].index - 1} is below committed {self.committed}")
        self.unstable.truncate_and_append(ents)
        return self.last_index()

    # --- reading ---
    def slice(self, lo: int, hi: int, max_size: int | None) -> list[Entry]:
        """Entries [lo, hi) within max_size bytes (at least one if lo < hi)."""
        if lo > hi:
            raise AssertionError(f"invalid slice {lo} > {hi}")
        fi = self.first_index()
        if lo < fi:
            raise CompactedError(f"index {lo} is compacted (first {fi})")
        if hi > self.last_index() + 1:
            raise AssertionError(f"slice[{lo},{hi}) out of bound, last {self.last_index()}")
        if lo == hi:
            return []
        ents: list[Entry] = []
        off = self.unstable.offset
        if lo < off:
            stored = self.storage.entries(lo, min(hi, off), max_size)
            if len(stored) < min(hi, off) - lo:
                return stored  # size limit reached inside storage
            ents = list(stored)
        if hi > off:
            ents.extend(self.unstable.slice(max(lo, off), hi))
        return limit_size(ents, max_size)

    def entries_from(self, i: int, max_size: int | None) -> list[Entry]:
        if i > self.last_index():
            return []
        return self.slice(i, self.last_index() + 1, max_size)

    def has_pending_snapshot(self) -> bool:
        return self.unstable.snapshot is not None

    def snapshot(self) -> Snapshot:
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()

    def next_committed_ents(self) -> list[Entry]:
        if self.has_pending_snapshot():
            return []  # the snapshot must be applied first
        lo = max(self.applying + 1, self.first_index())
        hi = self.committed + 1
        if lo >= hi:
            return []
        return self.slice(lo, hi, self.max_applying_size)

    def has_next_committed_ents(self) -> bool:
        if self.has_pending_snapshot():
            return False
        return self.committed > max(self.applying, self.first_index() - 1)

    # --- commit / apply / stable ---
    def commit_to(self, tocommit: int) -> None:
        if self.committed < tocommit:
            if self.last_index() < tocommit:
                raise AssertionError(f"commit {tocommit} is past the last index {self.last_index()}")
            self.committed = tocommit

    def maybe_commit(self, max_index: int, term: int, *, any_term: bool = False) -> bool:
        """Commit by counting only entries of the current term (paper 5.4.2)."""
        if max_index > self.committed and (any_term or self.zero_term_on_err(max_index) == term):
            self.commit_to(max_index)
            return True
        return False

    def accept_applying(self, i: int) -> None:
        self.applying = max(self.applying, i)

    def applied_to(self, i: int) -> None:
        if i == 0:
            return
        if self.committed < i or i < self.applied:
            raise AssertionError(f"applied {i} out of range [{self.applied}, {self.committed}]")
        self.applied = i
        self.applying = max(self.applying, i)

    def stable_to(self, i: int, t: int) -> None:
        self.unstable.stable_to(i, t)

    def stable_snap_to(self, i: int) -> None:
        self.unstable.stable_snap_to(i)

    def restore(self, s: Snapshot) -> None:
        self.committed = s.index
        self.unstable.restore(s)
