"""The log-file Raft storage (one flush per write): the storage contract against the memory
model with a reopen from the file before every comparison, torn tails cut at every byte
(a write whose flush never returned is dropped, nothing before it), corruption reported,
SIGKILL after a write keeps it."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodeos.cluster.raft import ConfState, Entry, HardState, MemoryStorage, Snapshot, SnapshotMeta
from nodeos.cluster.raft_logfile import LOG_FILE, LogFileRaftStorage
from nodeos.cluster.raft_storage import CorruptRecord
from tests.unit.raft.test_raft_storage import _observable, ents


@pytest.mark.parametrize("seed", range(12))
def test_log_file_storage_reopened_matches_the_memory_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    model = MemoryStorage()
    path = tmp_path / "raft"
    disk = LogFileRaftStorage.open(path)
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
        disk = LogFileRaftStorage.open(path)
        assert _observable(disk) == _observable(model)
    disk.close()


def test_a_torn_last_write_is_dropped_at_every_byte_and_nothing_before_it(tmp_path: Path) -> None:
    s = LogFileRaftStorage.open(tmp_path / "r")
    s.persist(HardState(1, 1, 0), ents((1, 1), (2, 1)), None)
    s.set_conf_state(ConfState((1, 2, 3), ()), 2)
    size_before = (tmp_path / "r" / LOG_FILE).stat().st_size
    s.persist(HardState(2, 2, 2), ents((3, 2)), None)
    s.close()
    full = (tmp_path / "r" / LOG_FILE).read_bytes()
    for cut in [*range(size_before, len(full)), size_before + 3]:
        for tail in (b"", b"\0" * 64):  # cut short, or cut short and zero-filled by the file system
            (tmp_path / "r" / LOG_FILE).write_bytes(full[:cut] + tail)
            s = LogFileRaftStorage.open(tmp_path / "r")
            assert s.initial_state() == (HardState(1, 1, 0), ConfState((1, 2, 3), ())), cut
            assert s.last_index() == 2
            s.persist(HardState(3, 3, 2), ents((3, 3)), None)  # appending after the cut works
            s.close()
            s = LogFileRaftStorage.open(tmp_path / "r")
            assert s.initial_state()[0] == HardState(3, 3, 2)
            assert [(e.index, e.term) for e in s.entries(1, 4)] == [(1, 1), (2, 1), (3, 3)]
            s.close()


def test_a_bad_record_with_good_records_after_it_is_corruption(tmp_path: Path) -> None:
    s = LogFileRaftStorage.open(tmp_path / "r")
    s.persist(HardState(1, 1, 0), [Entry(1, 1, data=b"MARKER-PAYLOAD")], None)
    s.persist(HardState(1, 1, 1), ents((2, 1)), None)
    s.close()
    f = tmp_path / "r" / LOG_FILE
    data = bytearray(f.read_bytes())
    pos = data.find(b"MARKER-PAYLOAD")
    data[pos] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CorruptRecord):
        LogFileRaftStorage.open(tmp_path / "r")


def test_a_write_that_returned_before_sigkill_is_kept(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal
        from nodeos.cluster.raft import Entry, HardState
        from nodeos.cluster.raft_logfile import LogFileRaftStorage
        s = LogFileRaftStorage.open({str(tmp_path / "r")!r})
        for i in range(1, 51):
            s.persist(HardState(i, 1, i - 1), [Entry(i, i, data=b"cmd%d" % i)], None)
        print("persisted", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no close, no clean shutdown
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    s = LogFileRaftStorage.open(tmp_path / "r")
    assert s.initial_state()[0] == HardState(50, 1, 49)
    assert s.entries(50, 51)[0].data == b"cmd50"
    s.close()


def test_an_older_nodes_lmdb_raft_store_is_imported_once(tmp_path: Path) -> None:
    from nodeos.cluster.raft_logfile import open_raft_storage
    from nodeos.cluster.raft_storage import LmdbRaftStorage

    path = tmp_path / "raft"
    old = LmdbRaftStorage.open(path)
    snap = Snapshot(SnapshotMeta(2, 1, ConfState((1, 2, 3), ())), b"map")
    old.persist(HardState(4, 2, 5), ents((3, 1), (4, 3), (5, 4), (6, 4)), snap)
    old.set_conf_state(ConfState((1, 2, 3, 4), ()), 4)
    want = _observable(old), old.initial_state()
    old.close()
    new = open_raft_storage(path)
    assert (_observable(new), new.initial_state()) == want
    new.persist(HardState(5, 2, 6), ents((7, 5)), None)
    new.close()
    again = open_raft_storage(path)  # the LMDB files are still there: not imported over the log
    assert again.last_index() == 7 and again.initial_state()[0] == HardState(5, 2, 6)
    again.close()
