"""Raft's stable storage as one append-only, checksummed log file: one device flush per Ready.

An LMDB commit costs two flushes (data, then the meta page); this file costs one `fdatasync`
per write, which is the floor the disk allows. Layout of `<dir>/log`, a sequence of records,
each `u32 length, u32 crc32(payload), payload` (big-endian; payload = msgpack map):
- the first record is the base: {"dummy": [index, term], "snap": {...} | None,
  "hard": [term, vote, commit], "conf": [index, voters, learners] | None, "ents": [...]};
- every later record is one write: {"hard": [...]?, "ents": [[index, term, type, data], ...]?,
  "conf": [...]?}. Entries starting at index i replace i and everything after it (paper 5.3).
A snapshot install, a local snapshot or a compaction rewrites the file: the new base and the
kept entries go to `log.tmp`, which is synced and renamed over `log` (the directory synced
after), so a crash leaves the old file or the new one, never a mix.

Reading back: a record cut short, or a last record whose checksum fails (with nothing but
zeros after it), is a write that never finished its flush (never acknowledged): it is cut
off the file. A bad record with
good data after it is corruption: CorruptRecord, never silently used. The whole log lives in
memory too (it is bounded by the driver's compaction), so Raft's reads never touch the disk.
An older node's LMDB Raft store in the same state dir is imported once (service.py).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from nodeos.store.lmdb_store import CorruptRecord

from .raft.storage import limit_size
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

LOG_FILE = "log"
_HEAD = struct.Struct(">II")
DB = "raft_logfile"  # names the store in CorruptRecord


@dataclass
class View:
    """What a finished write() changes, installed on the owner's thread by install()."""

    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    rewritten: bool = False


def _pack(obj: dict[str, Any]) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _ent(e: Entry) -> list[Any]:
    return [e.index, e.term, int(e.type), e.data]


def _hard(hs: HardState) -> list[int]:
    return [hs.term, hs.vote, hs.commit]


def _uint(v: Any) -> bool:
    return type(v) is int and v >= 0


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(type(x) is int and x > 0 for x in v)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LogFileRaftStorage:
    """Raft log, hard state and snapshot of one node, in one append-only file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._file = self.path / LOG_FILE
        self._dummy = (0, 0)
        self._ents: list[Entry] = []  # entries after the dummy, in index order
        self._hs = EMPTY_HARD_STATE
        self._snap = Snapshot()
        self._conf: tuple[int, ConfState] | None = None
        if self._file.exists():
            self._load()
        else:
            self._rewrite()
        self._fd = os.open(self._file, os.O_WRONLY | os.O_APPEND)

    @classmethod
    def open(cls, path: str | Path) -> LogFileRaftStorage:
        return cls(path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # --- reading the file back ---
    def _load(self) -> None:
        data = self._file.read_bytes()
        pos, n, good_end = 0, 0, 0
        while pos < len(data):
            if len(data) - pos < _HEAD.size:
                break  # a header cut short: torn tail
            length, crc = _HEAD.unpack_from(data, pos)
            if length == 0:
                if not any(data[pos:]):
                    break  # the zeros of an unfinished append: torn tail
                raise CorruptRecord(DB, str(pos).encode(), "empty record inside the log file")
            end = pos + _HEAD.size + length
            if end > len(data):
                break  # the record runs past the end: torn tail
            payload = data[pos + _HEAD.size : end]
            if zlib.crc32(payload) != crc:
                if not any(data[end:]):
                    break  # the last record, half written (maybe zero-filled after): torn tail
                raise CorruptRecord(DB, str(pos).encode(), "checksum mismatch inside the log file")
            try:
                rec = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            except Exception as exc:
                raise CorruptRecord(DB, str(pos).encode(), f"record does not decode ({exc})") from None
            self._replay(rec, pos, base=n == 0)
            n, pos, good_end = n + 1, end, end
        if n == 0:
            raise CorruptRecord(DB, b"0", "the log file has no readable base record")
        if good_end < len(data):
            # Never acknowledged (its flush never returned): cut it off before appending more.
            with open(self._file, "r+b") as f:
                f.truncate(good_end)
                os.fsync(f.fileno())

    def _replay(self, rec: Any, pos: int, *, base: bool) -> None:
        key = str(pos).encode()
        if not isinstance(rec, dict):
            raise CorruptRecord(DB, key, "record is not a map")
        if base:
            d, s = rec.get("dummy"), rec.get("snap")
            if not (isinstance(d, list) and len(d) == 2 and all(_uint(x) for x in d)):
                raise CorruptRecord(DB, key, "malformed log start")
            self._dummy = (d[0], d[1])
            if s is not None:
                ok = isinstance(s, dict) and _uint(s.get("index")) and _uint(s.get("term"))
                ok = ok and _ids(s.get("voters")) and _ids(s.get("learners"))
                if not (ok and isinstance(s.get("data"), bytes)):
                    raise CorruptRecord(DB, key, "malformed snapshot")
                cs = ConfState(tuple(s["voters"]), tuple(s["learners"]))
                self._snap = Snapshot(SnapshotMeta(s["index"], s["term"], cs), s["data"])
        h = rec.get("hard")
        if h is not None:
            if not (isinstance(h, list) and len(h) == 3 and all(_uint(x) for x in h)):
                raise CorruptRecord(DB, key, "malformed hard state")
            self._hs = HardState(h[0], h[1], h[2])
        c = rec.get("conf")
        if c is not None:
            if not (isinstance(c, list) and len(c) == 3 and _uint(c[0]) and _ids(c[1]) and _ids(c[2])):
                raise CorruptRecord(DB, key, "malformed conf state")
            self._conf = (c[0], ConfState(tuple(c[1]), tuple(c[2])))
        raw = rec.get("ents") or []
        ents = []
        for v in raw:
            ok = isinstance(v, list) and len(v) == 4 and _uint(v[0]) and _uint(v[1])
            if not (ok and v[2] in (EntryType.NORMAL, EntryType.CONF_CHANGE) and isinstance(v[3], bytes)):
                raise CorruptRecord(DB, key, "malformed log entry")
            ents.append(Entry(v[1], v[0], EntryType(v[2]), v[3]))
        if ents:
            self._splice(ents, key)

    def _splice(self, ents: list[Entry], key: bytes = b"") -> None:
        ents = [e for e in ents if e.index > self._dummy[0]]
        if not ents:
            return
        at = ents[0].index - self._dummy[0] - 1
        if at > len(self._ents):
            raise CorruptRecord(DB, key, f"gap in the log: last {self.last_index()}, next {ents[0].index}")
        self._ents[at:] = ents

    # --- read side ---
    def initial_state(self) -> tuple[HardState, ConfState]:
        cs = self._snap.meta.conf_state
        if self._conf is not None and self._conf[0] >= self._snap.meta.index:
            cs = self._conf[1]
        return self._hs, cs

    def first_index(self) -> int:
        return self._dummy[0] + 1

    def last_index(self) -> int:
        return self._dummy[0] + len(self._ents)

    def term(self, i: int) -> int:
        if i < self._dummy[0]:
            raise CompactedError(f"index {i} is compacted (first kept {self._dummy[0] + 1})")
        if i > self.last_index():
            raise UnavailableError(f"index {i} is past the last index {self.last_index()}")
        return self._dummy[1] if i == self._dummy[0] else self._ents[i - self._dummy[0] - 1].term

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        if lo <= self._dummy[0]:
            raise CompactedError(f"index {lo} is compacted (first kept {self._dummy[0] + 1})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"entries up to {hi} requested, last index is {self.last_index()}")
        off = self._dummy[0] + 1
        return limit_size(self._ents[lo - off : hi - off], max_size)

    def snapshot(self) -> Snapshot:
        return self._snap

    # --- write side ---
    def persist(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> None:
        self.install(self.write(hard_state, entries, snapshot))

    def write(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> View:
        """The durable half of persist(), one flush: safe on a worker thread while the owner
        keeps reading (nothing in memory changes until install())."""
        snap = snapshot if snapshot is not None and not snapshot.is_empty() else None
        if snap is not None:
            if snap.index <= self._snap.meta.index:
                raise SnapshotOutOfDate(f"snapshot at {snap.index} is not newer than {self._snap.meta.index}")
            dummy = (snap.index, snap.term)
            last = snap.index
        else:
            dummy, last = self._dummy, self.last_index()
        if entries and entries[0].index > last + 1:
            raise UnavailableError(f"missing log entries: last {last}, appending at {entries[0].index}")
        view = View(hard_state, list(entries), snap)
        if snap is not None:
            # The log restarts at the snapshot: a new base record, atomically renamed in.
            hs = hard_state if hard_state is not None else self._hs
            kept = [e for e in entries if e.index > dummy[0]]
            self._write_base(dummy, snap, hs, self._conf, kept)
            view.rewritten = True
            return view
        rec: dict[str, Any] = {}
        if hard_state is not None:
            rec["hard"] = _hard(hard_state)
        if entries:
            rec["ents"] = [_ent(e) for e in entries]
        if rec:
            self._append(_pack(rec))
        return view

    def install(self, view: View) -> None:
        """The write is durable: only now the in-memory view moves, on the owner's thread."""
        if view.snapshot is not None:
            self._snap = view.snapshot
            self._dummy = (view.snapshot.index, view.snapshot.term)
            self._ents = []
        if view.rewritten:
            self._reopen()
        if view.entries:
            self._splice(view.entries)
        if view.hard_state is not None:
            self._hs = view.hard_state

    def append(self, entries: list[Entry]) -> None:
        self.persist(None, entries, None)

    def set_hard_state(self, hs: HardState) -> None:
        self.persist(hs, [], None)

    def apply_snapshot(self, snap: Snapshot) -> None:
        self.persist(None, [], snap)

    def set_conf_state(self, cs: ConfState, index: int) -> None:
        """Record the membership the application applied at `index` (see LmdbRaftStorage)."""
        conf = [index, list(cs.voters), list(cs.learners)]
        self._append(_pack({"conf": conf}))
        self._conf = (index, cs)

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        if index <= self._snap.meta.index:
            raise SnapshotOutOfDate(f"snapshot at {index} is not newer than {self._snap.meta.index}")
        if index > self.last_index():
            raise UnavailableError(f"snapshot index {index} is past the last index {self.last_index()}")
        snap = Snapshot(SnapshotMeta(index, self.term(index), conf_state), data)
        # A snapshot covers committed entries only; the commit index is written lazily
        # (Ready.must_sync), so the stored one is raised to the snapshot here.
        hs = self._hs
        if hs.commit < index:
            hs = HardState(hs.term, hs.vote, index)
        self._write_base(self._dummy, snap, hs, self._conf, self._ents)
        self._snap, self._hs = snap, hs
        self._reopen()
        return snap

    def compact(self, index: int) -> None:
        if index <= self._dummy[0]:
            raise CompactedError(f"index {index} is already compacted")
        if index > self.last_index():
            raise UnavailableError(f"compact {index} is past the last index {self.last_index()}")
        dummy = (index, self.term(index))
        kept = self._ents[index - self._dummy[0] :]
        self._write_base(dummy, self._snap, self._hs, self._conf, kept)
        self._dummy, self._ents = dummy, kept
        self._reopen()

    # --- file plumbing ---
    def _append(self, record: bytes) -> None:
        _write_all(self._fd, record)
        os.fdatasync(self._fd)  # the one flush: data and the file size it needs

    def _rewrite(self) -> None:
        snap = self._snap if not self._snap.is_empty() else None
        self._write_base(self._dummy, snap, self._hs, self._conf, self._ents)

    def _write_base(
        self,
        dummy: tuple[int, int],
        snap: Snapshot | None,
        hs: HardState,
        conf: tuple[int, ConfState] | None,
        ents: list[Entry],
    ) -> None:
        base: dict[str, Any] = {"dummy": list(dummy), "hard": _hard(hs), "ents": [_ent(e) for e in ents]}
        if snap is not None and not snap.is_empty():
            m = snap.meta
            base["snap"] = {
                "index": m.index,
                "term": m.term,
                "voters": list(m.conf_state.voters),
                "learners": list(m.conf_state.learners),
                "data": snap.data,
            }
        if conf is not None:
            base["conf"] = [conf[0], list(conf[1].voters), list(conf[1].learners)]
        tmp = self.path / (LOG_FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, _pack(base))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._file)
        _fsync_dir(self.path)

    def _reopen(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
        self._fd = os.open(self._file, os.O_WRONLY | os.O_APPEND)


def open_raft_storage(path: Path) -> LogFileRaftStorage:
    """The daemon's Raft storage at `path`; a Raft store an older nodeos kept in LMDB there is
    imported first (once: the log file, renamed in whole, marks it done)."""
    if (path / "data.mdb").exists() and not (path / LOG_FILE).exists():
        from nodeos.cluster.raft_storage import LmdbRaftStorage

        old = LmdbRaftStorage.open(path)
        try:
            hs, _ = old.initial_state()
            first, last = old.first_index(), old.last_index()
            ents = old.entries(first, last + 1) if last >= first else []
            new = LogFileRaftStorage.__new__(LogFileRaftStorage)
            new.path, new._file = path, path / LOG_FILE
            new._write_base((first - 1, old.term(first - 1)), old.snapshot(), hs, old._conf, ents)
        finally:
            old.close()
    return LogFileRaftStorage.open(path)
