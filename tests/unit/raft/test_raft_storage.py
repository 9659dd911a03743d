"""Raft stable storage: the same contract for MemoryStorage and the LMDB storage, plus
LMDB-only durability: one synced transaction per Ready, reopen after SIGKILL, and corrupt
bytes on disk reported as CorruptRecord."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.cluster.raft import (
    CompactedError,
    ConfState,
    Entry,
    EntryType,
    HardState,
    MemoryStorage,
    Snapshot,
    SnapshotMeta,
    SnapshotOutOfDate,
    UnavailableError,
)
from nodeos.cluster.raft_logfile import LogFileRaftStorage
from nodeos.cluster.raft_storage import CorruptRecord, LmdbRaftStorage


def ents(*pairs: tuple[int, int]) -> list[Entry]:
    return [Entry(term, index, EntryType.NORMAL, b"d%d" % index) for index, term in pairs]


@pytest.fixture(params=["memory", "lmdb"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStorage | LmdbRaftStorage]:
    if request.param == "memory":
        yield MemoryStorage()
    else:
        s = LmdbRaftStorage.open(tmp_path / "raft")
        yield s
        s.close()


def test_empty_storage(storage: MemoryStorage | LmdbRaftStorage) -> None:
    hs, cs = storage.initial_state()
    assert hs == HardState()
    assert cs == ConfState()
    assert storage.first_index() == 1
    assert storage.last_index() == 0
    assert storage.term(0) == 0
    with pytest.raises(UnavailableError):
        storage.term(1)


def test_persist_append_and_read(storage: MemoryStorage | LmdbRaftStorage) -> None:
    storage.persist(HardState(2, 1, 2), ents((1, 1), (2, 2), (3, 2)), None)
    assert storage.initial_state()[0] == HardState(2, 1, 2)
    assert storage.last_index() == 3
    assert [e.term for e in storage.entries(1, 4)] == [1, 2, 2]
    assert storage.entries(2, 3)[0].data == b"d2"
    # Size limit: always at least one entry, then only what fits.
    assert len(storage.entries(1, 4, max_size=1)) == 1
    assert len(storage.entries(1, 4, max_size=2 * Entry(0, 0, data=b"d1").size())) == 2
    with pytest.raises(UnavailableError):
        storage.entries(1, 5)


def test_append_truncates_conflicting_suffix(storage: MemoryStorage | LmdbRaftStorage) -> None:
    storage.persist(None, ents((1, 1), (2, 1), (3, 1), (4, 1)), None)
    storage.append(ents((3, 2)))
    assert storage.last_index() == 3
    assert [e.term for e in storage.entries(1, 4)] == [1, 1, 2]
    with pytest.raises(UnavailableError):
        storage.append(ents((9, 3)))  # would leave a hole


def test_snapshot_compact_and_apply(storage: MemoryStorage | LmdbRaftStorage) -> None:
    storage.persist(HardState(3, 0, 5), ents((1, 1), (2, 1), (3, 2), (4, 3), (5, 3)), None)
    cs = ConfState((1, 2, 3), ())
    snap = storage.create_snapshot(4, cs, b"state@4")
    assert snap.meta == SnapshotMeta(4, 3, cs)
    storage.compact(3)
    assert storage.first_index() == 4
    assert storage.term(3) == 2  # the compacted position keeps its term
    with pytest.raises(CompactedError):
        storage.entries(3, 5)
    with pytest.raises(CompactedError):
        storage.term(2)
    assert [e.index for e in storage.entries(4, 6)] == [4, 5]
    with pytest.raises(SnapshotOutOfDate):
        storage.create_snapshot(4, cs, b"again")
    # Installing a newer snapshot from a leader replaces the whole log.
    new = Snapshot(SnapshotMeta(10, 4, ConfState((1, 2, 3, 4), ())), b"state@10")
    storage.apply_snapshot(new)
    assert storage.snapshot() == new
    assert (storage.first_index(), storage.last_index()) == (11, 10)
    assert storage.term(10) == 4
    assert storage.initial_state()[1] == ConfState((1, 2, 3, 4), ())
    storage.append(ents((11, 4)))
    assert storage.entries(11, 12)[0].data == b"d11"


def test_lmdb_state_survives_reopen(tmp_path: Path) -> None:
    s = LmdbRaftStorage.open(tmp_path / "r")
    snap = Snapshot(SnapshotMeta(2, 1, ConfState((1, 2, 3), (4,))), b"s")
    s.persist(HardState(5, 2, 4), ents((3, 1), (4, 5)), snap)
    s.set_conf_state(ConfState((1, 2, 3, 4), ()), 4)
    s.close()
    s = LmdbRaftStorage.open(tmp_path / "r")
    assert s.initial_state() == (HardState(5, 2, 4), ConfState((1, 2, 3, 4), ()))
    assert s.snapshot() == snap
    assert (s.first_index(), s.last_index()) == (3, 4)
    assert [(e.index, e.term) for e in s.entries(3, 5)] == [(3, 1), (4, 5)]
    s.close()


def test_lmdb_persist_is_one_transaction(tmp_path: Path) -> None:
    s = LmdbRaftStorage.open(tmp_path / "r")
    s.persist(HardState(1, 1, 0), ents((1, 1)), None)
    bad = [Entry(2, 2, EntryType.NORMAL, b"ok"), Entry(2, 3, EntryType.NORMAL, object())]  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.persist(HardState(2, 2, 1), bad, None)
    s.close()
    s = LmdbRaftStorage.open(tmp_path / "r")
    # Nothing of the failed Ready reached the disk: neither entry 2 nor the new hard state.
    assert s.initial_state()[0] == HardState(1, 1, 0)
    assert s.last_index() == 1
    s.close()


def test_lmdb_ready_persisted_before_sigkill_is_kept(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from nodeos.cluster.raft import Entry, HardState
        from nodeos.cluster.raft_storage import LmdbRaftStorage
        s = LmdbRaftStorage.open({str(tmp_path / "r")!r})
        for i in range(1, 51):
            s.persist(HardState(i, 1, i - 1), [Entry(i, i, data=b"cmd%d" % i)], None)
        print("persisted", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no close, no clean shutdown
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    assert "persisted" in out.stdout
    s = LmdbRaftStorage.open(tmp_path / "r")
    assert s.initial_state()[0] == HardState(50, 1, 49)
    assert s.last_index() == 50
    assert s.entries(50, 51)[0].data == b"cmd50"
    s.close()


def _flip_on_disk(path: Path, marker: bytes) -> int:
    data = bytearray((path / "data.mdb").read_bytes())
    n = 0
    pos = data.find(marker)
    while pos >= 0:
        data[pos + len(marker) - 1] ^= 0xFF
        n += 1
        pos = data.find(marker, pos + 1)
    (path / "data.mdb").write_bytes(bytes(data))
    return n


def test_lmdb_corrupt_entry_is_reported_not_used(tmp_path: Path) -> None:
    s = LmdbRaftStorage.open(tmp_path / "r")
    s.persist(
        HardState(1, 1, 0),
        [Entry(1, 1, data=b"fine-entry"), Entry(1, 2, data=b"MARKER-PAYLOAD-2"), Entry(1, 3, data=b"x")],
        None,
    )
    s.close()
    assert _flip_on_disk(tmp_path / "r", b"MARKER-PAYLOAD-2") >= 1
    s = LmdbRaftStorage.open(tmp_path / "r")
    assert s.entries(1, 2)[0].data == b"fine-entry"
    with pytest.raises(CorruptRecord) as exc:
        s.entries(1, 4)
    assert exc.value.db == "raft_log"
    with pytest.raises(CorruptRecord):
        s.term(2)
    s.close()


def test_lmdb_corrupt_hard_state_fails_open(tmp_path: Path) -> None:
    s = LmdbRaftStorage.open(tmp_path / "r")
    s.persist(HardState(987654321, 1, 0), [], None)
    s.close()
    marker = (987654321).to_bytes(4, "big")  # msgpack uint32 body of the term
    assert _flip_on_disk(tmp_path / "r", marker) >= 1
    with pytest.raises(CorruptRecord) as exc:
        LmdbRaftStorage.open(tmp_path / "r")
    assert exc.value.db == "raft_state"


def _observable(s: MemoryStorage | LmdbRaftStorage) -> tuple[object, ...]:
    first, last = s.first_index(), s.last_index()
    return (
        s.initial_state()[0],
        first,
        last,
        [s.term(i) for i in range(first - 1, last + 1)],
        s.entries(first, last + 1) if last >= first else [],
        s.snapshot(),
    )


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("on_disk", [LmdbRaftStorage, LogFileRaftStorage])
def test_disk_storage_reopened_matches_the_memory_model(
    tmp_path: Path, seed: int, on_disk: type[LmdbRaftStorage] | type[LogFileRaftStorage]
) -> None:
    # Random Ready-like writes (appends that overwrite a suffix, snapshot installs inside
    # and past the log, local snapshots and compaction) applied to both storages; the on-disk
    # one is closed and reopened from its files before every comparison, so nothing kept
    # only in its memory can pass for being on disk.
    rng = random.Random(seed)
    model = MemoryStorage()
    path = tmp_path / "raft"
    disk = on_disk.open(path)
    term = 1
    for _ in range(60):
        first, last = model.first_index(), model.last_index()
        x = rng.random()
        hs = (
            HardState(term, rng.choice([0, 1, 2]), min(last, rng.randint(0, last)))
            if rng.random() < 0.5
            else None
        )
        if x < 0.6:
            start = rng.randint(first, last + 1)  # <= last: a conflicting suffix is replaced
            term += rng.choice([0, 0, 1])
            new = ents(*[(i, term) for i in range(start, start + rng.randint(1, 5))])
            model.persist(hs, new, None)
            disk.persist(hs, new, None)
        elif x < 0.75:
            index = model.snapshot().index + rng.randint(1, 12)  # inside or past the log
            term += 1
            snap = Snapshot(SnapshotMeta(index, term, ConfState((1, 2, 3), ())), b"s%d" % index)
            model.persist(hs, [], snap)
            disk.persist(hs, [], snap)
        elif last >= first and model.snapshot().index < last:
            index = rng.randint(model.snapshot().index + 1, last)
            model.create_snapshot(index, ConfState((1, 2), ()), b"local%d" % index)
            disk.create_snapshot(index, ConfState((1, 2), ()), b"local%d" % index)
            upto = rng.randint(first, index)
            model.compact(upto)
            disk.compact(upto)
        disk.close()
        disk = on_disk.open(path)
        assert _observable(disk) == _observable(model)
    disk.close()
