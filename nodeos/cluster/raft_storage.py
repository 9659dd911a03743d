"""Raft's stable storage in LMDB (implements nodeos.cluster.raft.Storage).

Layout, in the node's LMDB environment (nodeos.store.lmdb_store.Store):
- sub-db "raft_log": int index -> [index, term, type, data]
- sub-db "raft_state": "hard" -> [term, vote, commit]; "dummy" -> [index, term] (the last
  compacted position, whose term is still needed); "snap" -> snapshot metadata + data;
  "conf" -> [index, voters, learners], the membership the application last applied.

Every Ready that must be synced is written in ONE synced LMDB transaction (snapshot, then
entries, then hard state), so a crash keeps all of it or none, and the caller sends the
Ready's promises (acks, votes) only after it returns. `persist()` does it in one call; the
driver runs `write()` on its disk thread and `install()` on the event loop. A change of the
commit index alone is not synced (it rides along with the next write; a snapshot raises it).
Records carry a checksum (lmdb_store); a torn or corrupt record raises CorruptRecord, it is
never silently used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeos.store.lmdb_store import CorruptRecord, Store, Txn, key_bytes

from .raft.types import (
    EMPTY_HARD_STATE,
    CompactedError,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    SnapshotMeta,
    SnapshotOutOfDate,
    UnavailableError,
)

LOG_DB = "raft_log"
STATE_DB = "raft_state"
RAFT_DBS = (LOG_DB, STATE_DB)

__all__ = ["RAFT_DBS", "CorruptRecord", "LmdbRaftStorage"]


def _is_uint(v: Any) -> bool:
    return type(v) is int and v >= 0


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(type(x) is int and x > 0 for x in v)


@dataclass(frozen=True)
class View:
    """What a finished write() changed: the log bounds, snapshot and hard state."""

    dummy: tuple[int, int]
    last: int
    meta: SnapshotMeta
    data: bytes
    hard_state: HardState | None


class LmdbRaftStorage:
    """Raft log, hard state and snapshot of one node, in LMDB."""

    def __init__(self, store: Store) -> None:
        for db in RAFT_DBS:
            store.db(db)  # KeyError naming the missing sub-db if the Store lacks it
        self.store = store
        with store.read() as txn:
            self._hs = self._read_hard(txn)
            self._dummy = self._read_dummy(txn)
            self._snap_meta, self._snap_data = self._read_snap(txn)
            self._conf = self._read_conf(txn)
            last = txn.last_key(LOG_DB)
            self._last = int.from_bytes(last, "big") if last is not None else self._dummy[0]
            if self._last < self._dummy[0]:
                raise CorruptRecord(LOG_DB, last or b"", f"log ends at {self._last} before its start")

    @classmethod
    def open(cls, path: str | Path) -> LmdbRaftStorage:
        """A dedicated LMDB environment (tests, tools). The daemon passes its own Store."""
        return cls(Store(path, dbs=RAFT_DBS))

    def close(self) -> None:
        self.store.close()

    # --- decoding with shape checks: a record that decodes but is malformed is corrupt too ---
    @staticmethod
    def _read_hard(txn: Txn) -> HardState:
        v = txn.get(STATE_DB, "hard")
        if v is None:
            return EMPTY_HARD_STATE
        if not (isinstance(v, list) and len(v) == 3 and all(_is_uint(x) for x in v)):
            raise CorruptRecord(STATE_DB, b"hard", "malformed hard state")
        return HardState(v[0], v[1], v[2])

    @staticmethod
    def _read_dummy(txn: Txn) -> tuple[int, int]:
        v = txn.get(STATE_DB, "dummy")
        if v is None:
            return (0, 0)
        if not (isinstance(v, list) and len(v) == 2 and all(_is_uint(x) for x in v)):
            raise CorruptRecord(STATE_DB, b"dummy", "malformed log start")
        return (v[0], v[1])

    @staticmethod
    def _read_snap(txn: Txn) -> tuple[SnapshotMeta, bytes]:
        v = txn.get(STATE_DB, "snap")
        if v is None:
            return SnapshotMeta(), b""
        ok = (
            isinstance(v, dict)
            and _is_uint(v.get("index"))
            and _is_uint(v.get("term"))
            and _ids(v.get("voters"))
            and _ids(v.get("learners"))
            and isinstance(v.get("data"), bytes)
        )
        if not ok:
            raise CorruptRecord(STATE_DB, b"snap", "malformed snapshot")
        cs = ConfState(tuple(v["voters"]), tuple(v["learners"]))
        return SnapshotMeta(v["index"], v["term"], cs), v["data"]

    @staticmethod
    def _read_conf(txn: Txn) -> tuple[int, ConfState] | None:
        v = txn.get(STATE_DB, "conf")
        if v is None:
            return None
        if not (isinstance(v, list) and len(v) == 3 and _is_uint(v[0]) and _ids(v[1]) and _ids(v[2])):
            raise CorruptRecord(STATE_DB, b"conf", "malformed conf state")
        return v[0], ConfState(tuple(v[1]), tuple(v[2]))

    @staticmethod
    def _decode_entry(k: bytes, v: Any) -> Entry:
        ok = (
            isinstance(v, list)
            and len(v) == 4
            and _is_uint(v[0])
            and _is_uint(v[1])
            and v[2] in (EntryType.NORMAL, EntryType.CONF_CHANGE)
            and isinstance(v[3], bytes)
        )
        if not ok:
            raise CorruptRecord(LOG_DB, k, "malformed log entry")
        if key_bytes(v[0]) != k:
            raise CorruptRecord(LOG_DB, k, f"entry says index {v[0]}, stored under another key")
        return Entry(v[1], v[0], EntryType(v[2]), v[3])

    # --- read side ---
    def initial_state(self) -> tuple[HardState, ConfState]:
        cs = self._snap_meta.conf_state
        if self._conf is not None and self._conf[0] >= self._snap_meta.index:
            cs = self._conf[1]
        return self._hs, cs

    def first_index(self) -> int:
        return self._dummy[0] + 1

    def last_index(self) -> int:
        return self._last

    def term(self, i: int) -> int:
        if i < self._dummy[0]:
            raise CompactedError(f"index {i} is compacted (first kept {self._dummy[0] + 1})")
        if i > self._last:
            raise UnavailableError(f"index {i} is past the last index {self._last}")
        if i == self._dummy[0]:
            return self._dummy[1]
        with self.store.read() as txn:
            v = txn.get(LOG_DB, i)
        if v is None:
            raise CorruptRecord(LOG_DB, key_bytes(i), "entry missing inside the log")
        return self._decode_entry(key_bytes(i), v).term

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        if lo <= self._dummy[0]:
            raise CompactedError(f"index {lo} is compacted (first kept {self._dummy[0] + 1})")
        if hi > self._last + 1:
            raise UnavailableError(f"entries up to {hi} requested, last index is {self._last}")
        out: list[Entry] = []
        size = 0
        with self.store.read() as txn:
            # Point reads, not a cursor: a record past `hi` is never decoded, so a corrupt
            # record only fails the reads that need it.
            for i in range(lo, hi):
                v = txn.get(LOG_DB, i)
                if v is None:
                    raise CorruptRecord(LOG_DB, key_bytes(i), "entry missing inside the log")
                e = self._decode_entry(key_bytes(i), v)
                size += e.size()
                if out and max_size is not None and size > max_size:
                    break
                out.append(e)
        return out

    def snapshot(self) -> Snapshot:
        return Snapshot(self._snap_meta, self._snap_data)

    # --- write side ---
    def persist(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> None:
        """Snapshot + entries + hard state in one synced transaction."""
        self.install(self.write(hard_state, entries, snapshot))

    def write(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> View:
        """The durable half of persist(): safe to run on a worker thread while the owner keeps
        reading (LMDB readers see the previous commit). Returns the view install() takes on."""
        if snapshot is not None and not snapshot.is_empty() and snapshot.index <= self._snap_meta.index:
            raise SnapshotOutOfDate(f"snapshot at {snapshot.index} is not newer than {self._snap_meta.index}")
        dummy, last, meta, data = self._dummy, self._last, self._snap_meta, self._snap_data
        with self.store.write() as txn:
            if snapshot is not None and not snapshot.is_empty():
                self._put_snap(txn, snapshot.meta, snapshot.data)
                txn.delete_range(LOG_DB, 0, None)
                dummy = (snapshot.index, snapshot.term)
                txn.put(STATE_DB, "dummy", list(dummy))
                last = snapshot.index
                meta, data = snapshot.meta, snapshot.data
            if entries:
                first = entries[0].index
                if first > last + 1:
                    raise UnavailableError(f"missing log entries: last {last}, appending at {first}")
                entries = [e for e in entries if e.index > dummy[0]]
                if entries:
                    # A new entry at index i replaces i and everything after it (paper 5.3).
                    txn.delete_range(LOG_DB, entries[0].index, None)
                    for e in entries:
                        txn.put(LOG_DB, e.index, [e.index, e.term, int(e.type), e.data])
                    last = entries[-1].index
            if hard_state is not None:
                txn.put(STATE_DB, "hard", [hard_state.term, hard_state.vote, hard_state.commit])
        return View(dummy, last, meta, data, hard_state)

    def install(self, view: View) -> None:
        """Committed (synced): only now the in-memory view moves, on the owner's thread."""
        self._dummy, self._last = view.dummy, view.last
        self._snap_meta, self._snap_data = view.meta, view.data
        if view.hard_state is not None:
            self._hs = view.hard_state

    @staticmethod
    def _put_snap(txn: Txn, meta: SnapshotMeta, data: bytes) -> None:
        txn.put(
            STATE_DB,
            "snap",
            {
                "index": meta.index,
                "term": meta.term,
                "voters": list(meta.conf_state.voters),
                "learners": list(meta.conf_state.learners),
                "data": data,
            },
        )

    def append(self, entries: list[Entry]) -> None:
        self.persist(None, entries, None)

    def set_hard_state(self, hs: HardState) -> None:
        self.persist(hs, [], None)

    def apply_snapshot(self, snap: Snapshot) -> None:
        self.persist(None, [], snap)

    def set_conf_state(self, cs: ConfState, index: int) -> None:
        """Record the membership the application applied at `index` (used after a restart
        when the application resumes with Config.applied beyond the snapshot)."""
        with self.store.write() as txn:
            txn.put(STATE_DB, "conf", [index, list(cs.voters), list(cs.learners)])
        self._conf = (index, cs)

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        if index <= self._snap_meta.index:
            raise SnapshotOutOfDate(f"snapshot at {index} is not newer than {self._snap_meta.index}")
        if index > self._last:
            raise UnavailableError(f"snapshot index {index} is past the last index {self._last}")
        meta = SnapshotMeta(index, self.term(index), conf_state)
        # A snapshot covers committed entries only; the commit index is written lazily
        # (Ready.must_sync), so the stored one is raised to the snapshot here, or a restart
        # would find a commit index behind its own snapshot.
        hs = self._hs
        if hs.commit < index:
            hs = HardState(hs.term, hs.vote, index)
        with self.store.write() as txn:
            self._put_snap(txn, meta, data)
            txn.put(STATE_DB, "hard", [hs.term, hs.vote, hs.commit])
        self._snap_meta, self._snap_data, self._hs = meta, data, hs
        return Snapshot(meta, data)

    def compact(self, index: int) -> None:
        if index <= self._dummy[0]:
            raise CompactedError(f"index {index} is already compacted")
        if index > self._last:
            raise UnavailableError(f"compact {index} is past the last index {self._last}")
        dummy = (index, self.term(index))
        with self.store.write() as txn:
            txn.delete_range(LOG_DB, 0, index + 1)
            txn.put(STATE_DB, "dummy", list(dummy))
        self._dummy = dummy
