"""The storage interface Raft reads its stable log from, and an in-memory implementation.

Raft only READS storage (initial_state, entries, term, first/last index, snapshot).
The application WRITES it after each Ready: `persist(hard_state, entries, snapshot)`
in one durable transaction, before sending the Ready's messages. `create_snapshot`
and `compact` let the application trim the log once its state machine is snapshotted.

Index conventions (as in etcd): the storage keeps a "dummy" position at the snapshot's
index whose term is known (the snapshot's term), so term(first_index() - 1) works.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .types import (
    EMPTY_HARD_STATE,
    CompactedError,
    ConfState,
    Entry,
    HardState,
    Snapshot,
    SnapshotMeta,
    SnapshotOutOfDate,
    UnavailableError,
)


def limit_size(entries: list[Entry], max_size: int | None) -> list[Entry]:
    """The longest prefix within max_size bytes, but always at least one entry."""
    if max_size is None or len(entries) <= 1:
        return entries
    total = entries[0].size()
    n = 1
    while n < len(entries):
        total += entries[n].size()
        if total > max_size:
            break
        n += 1
    return entries[:n]


@runtime_checkable
class Storage(Protocol):
    # --- read side (used by Raft) ---
    def initial_state(self) -> tuple[HardState, ConfState]: ...
    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        """Entries [lo, hi), at most max_size bytes (at least one). CompactedError if lo
        is at or before the snapshot; UnavailableError if hi > last_index()+1."""
        ...

    def term(self, i: int) -> int:
        """Term of entry i; valid for first_index()-1 <= i <= last_index()."""
        ...

    def first_index(self) -> int: ...
    def last_index(self) -> int: ...
    def snapshot(self) -> Snapshot: ...

    # --- write side (used by the application after a Ready) ---
    def persist(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> None:
        """Snapshot, entries and hard state in ONE durable step (a crash keeps all or none)."""
        ...

    def append(self, entries: list[Entry]) -> None: ...
    def set_hard_state(self, hs: HardState) -> None: ...
    def apply_snapshot(self, snap: Snapshot) -> None: ...
    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot: ...
    def compact(self, index: int) -> None:
        """Discard entries up to and including `index` (its term is kept); index <= applied."""
        ...


class MemoryStorage:
    """Storage in RAM. The simulator models durability around it (only synced Readies survive)."""

    def __init__(self) -> None:
        self._hard_state = EMPTY_HARD_STATE
        self._snapshot = Snapshot()
        # _ents[0] is the dummy at the snapshot position (term known, no data).
        self._ents: list[Entry] = [Entry(0, 0)]

    # read side
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hard_state, self._snapshot.meta.conf_state

    def first_index(self) -> int:
        return self._ents[0].index + 1

    def last_index(self) -> int:
        return self._ents[0].index + len(self._ents) - 1

    def term(self, i: int) -> int:
        offset = self._ents[0].index
        if i < offset:
            raise CompactedError(f"index {i} is compacted (first kept {offset + 1})")
        if i - offset >= len(self._ents):
            raise UnavailableError(f"index {i} is past the last index {self.last_index()}")
        return self._ents[i - offset].term

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        offset = self._ents[0].index
        if lo <= offset:
            raise CompactedError(f"index {lo} is compacted (first kept {offset + 1})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"entries up to {hi} requested, last index is {self.last_index()}")
        return limit_size(self._ents[lo - offset : hi - offset], max_size)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # write side
    def persist(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> None:
        if snapshot is not None and not snapshot.is_empty():
            self.apply_snapshot(snapshot)
        if entries:
            self.append(entries)
        if hard_state is not None:
            self.set_hard_state(hard_state)

    def set_hard_state(self, hs: HardState) -> None:
        self._hard_state = hs

    def append(self, entries: list[Entry]) -> None:
        if not entries:
            return
        first = self.first_index()
        last = entries[-1].index
        if last < first:
            return  # entirely compacted already
        if entries[0].index < first:
            entries = entries[first - entries[0].index :]
        offset = entries[0].index - self._ents[0].index
        if offset > len(self._ents):
            raise UnavailableError(
                f"missing log entries: last {self.last_index()}, appending at {entries[0].index}"
            )
        # Truncate any conflicting suffix, then append.
        self._ents = self._ents[:offset] + list(entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        if snap.meta.index <= self._snapshot.meta.index:
            raise SnapshotOutOfDate(
                f"snapshot at {snap.meta.index} is not newer than {self._snapshot.meta.index}"
            )
        self._snapshot = snap
        self._ents = [Entry(snap.meta.term, snap.meta.index)]

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        if index <= self._snapshot.meta.index:
            raise SnapshotOutOfDate(f"snapshot at {index} is not newer than {self._snapshot.meta.index}")
        if index > self.last_index():
            raise UnavailableError(f"snapshot index {index} is past the last index {self.last_index()}")
        self._snapshot = Snapshot(SnapshotMeta(index, self.term(index), conf_state), data)
        # A snapshot only ever covers committed entries; the commit index itself is written
        # lazily (Ready.must_sync), so record here that it reaches at least the snapshot.
        hs = self._hard_state
        if hs.commit < index:
            self._hard_state = HardState(hs.term, hs.vote, index)
        return self._snapshot

    def compact(self, index: int) -> None:
        offset = self._ents[0].index
        if index <= offset:
            raise CompactedError(f"index {index} is already compacted")
        if index > self.last_index():
            raise UnavailableError(f"compact {index} is past the last index {self.last_index()}")
        i = index - offset
        self._ents = [Entry(self._ents[i].term, self._ents[i].index), *self._ents[i + 1 :]]
