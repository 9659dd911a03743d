"""Entries and snapshot not yet on stable storage (handed out in Ready, dropped on advance)."""

from __future__ import annotations

from .types import Entry, Snapshot


class Unstable:
    def __init__(self, offset: int) -> None:
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.offset = offset  # index of entries[0]

    def maybe_first_index(self) -> int | None:
        return self.snapshot.index + 1 if self.snapshot is not None else None

    def maybe_last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        if self.snapshot is not None:
            return self.snapshot.index
        return None

    def maybe_term(self, i: int) -> int | None:
        if i < self.offset:
            if self.snapshot is not None and self.snapshot.index == i:
                return self.snapshot.term
            return None
        last = self.maybe_last_index()
        if last is None or i > last:
            return None
        return self.entries[i - self.offset].term

    def stable_to(self, i: int, t: int) -> None:
        """Entries up to (i, t) reached storage; a mismatching term means they were replaced since."""
        if i < self.offset:
            return
        if self.maybe_term(i) != t:
            return
        self.entries = self.entries[i + 1 - self.offset :]
        self.offset = i + 1

    def stable_snap_to(self, i: int) -> None:
        if self.snapshot is not None and self.snapshot.index == i:
            self.snapshot = None

    def restore(self, s: Snapshot) -> None:
        self.offset = s.index + 1
        self.entries = []
        self.snapshot = s

    def truncate_and_append(self, ents: list[Entry]) -> None:
        after = ents[0].index
        if after == self.offset + len(self.entries):
            self.entries.extend(ents)
        elif after <= self.offset:
            # Replaces everything unstable; storage truncates its own suffix when it persists.
            self.offset = after
            self.entries = list(ents)
        else:
            self.entries = self.entries[: after - self.offset] + list(ents)

    def slice(self, lo: int, hi: int) -> list[Entry]:
        if lo < self.offset or hi > self.offset + len(self.entries):
            raise AssertionError(
                f"unstable.slice[{lo},{hi}) out of bound [{self.offset},{self.offset + len(self.entries)}]"
            )
        return self.entries[lo - self.offset : hi - self.offset]
