"""The copy of a published volume (nodeos/node/pubcopy.py) on real files: every byte copied,
the sha256 of exactly the volume's bytes, progress to 1, the rate cap honoured, a cancel and a
short source refused (a copy is whole or nothing); a copy stopped midway resumes from its last
checkpoint and still verifies, a prefix damaged meanwhile is copied again."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeos.node.pubcopy import CHUNK, Cancelled, copy_and_hash


def _src(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    p = tmp_path / "src"
    p.write_bytes(data + b"tail beyond the volume")
    return p, data


def test_copies_every_byte_and_hashes_exactly_the_volume(tmp_path: Path) -> None:
    size = 3 * CHUNK + 4096
    src, data = _src(tmp_path, size)
    dst = tmp_path / "dst"
    dst.write_bytes(b"\0" * size)
    seen: list[float] = []
    sha = copy_and_hash(str(src), size, str(dst), progress=seen.append)
    assert sha == hashlib.sha256(data).hexdigest()
    assert dst.read_bytes() == data
    assert seen[-1] == 1.0 and seen == sorted(seen)
    assert copy_and_hash(str(dst), size) == sha  # a read alone gives the same sum


def test_the_rate_cap_paces_the_copy(tmp_path: Path) -> None:
    size = 4 * CHUNK
    src, _ = _src(tmp_path, size)
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    copy_and_hash(str(src), size, limit_bps=CHUNK, clock=lambda: now[0], sleep=sleep)
    assert now[0] == pytest.approx(4.0)  # 4 MiB at 1 MiB/s


def test_a_cancel_or_a_short_source_fails_the_copy(tmp_path: Path) -> None:
    src, _ = _src(tmp_path, CHUNK)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        copy_and_hash(str(src), CHUNK, cancel=stop)
    with pytest.raises(OSError, match="short read"):
        copy_and_hash(str(src), 4 * CHUNK)


def _stop_after(segments: int, seen: list[list[str]], stop: threading.Event) -> Callable[[list[str]], None]:
    def checkpoint(digests: list[str]) -> None:
        seen.append(digests)
        if len(digests) == segments:
            stop.set()  # the daemon stops here: the next chunk raises Cancelled

    return checkpoint


def test_a_copy_stopped_midway_resumes_from_its_last_checkpoint_and_still_verifies(tmp_path: Path) -> None:
    seg = 2 * CHUNK
    size = 5 * seg + 4096  # five whole segments and a short last one
    src, data = _src(tmp_path, size)
    dst = tmp_path / "dst"
    dst.write_bytes(b"\0" * size)
    stop, seen = threading.Event(), []
    with pytest.raises(Cancelled):
        copy_and_hash(
            str(src), size, str(dst), cancel=stop, checkpoint=_stop_after(2, seen, stop), segment_bytes=seg
        )
    recorded = seen[-1]
    assert len(recorded) == 2 and dst.read_bytes()[: 2 * seg] == data[: 2 * seg]
    assert dst.read_bytes()[2 * seg :] == b"\0" * (size - 2 * seg)  # nothing past the stop was written

    with open(src, "r+b") as f:  # the source's prefix now differs: were it read again, it would show
        f.write(b"x" * 2 * seg)
    progress: list[float] = []
    sha = copy_and_hash(
        str(src), size, str(dst), resume=recorded, checkpoint=seen.append, progress=progress.append,
        segment_bytes=seg,
    )  # fmt: skip
    assert sha == hashlib.sha256(data).hexdigest()
    assert dst.read_bytes() == data  # the prefix was read back from the local copy, not copied again
    assert progress[0] == pytest.approx(2 * seg / size) and progress[-1] == 1.0
    assert len(seen[-1]) == 6 and seen[-1][:2] == recorded


def test_a_prefix_damaged_while_stopped_is_copied_again_not_trusted(tmp_path: Path) -> None:
    seg = 2 * CHUNK
    size = 4 * seg
    src, data = _src(tmp_path, size)
    dst = tmp_path / "dst"
    dst.write_bytes(b"\0" * size)
    stop, seen = threading.Event(), []
    with pytest.raises(Cancelled):
        copy_and_hash(
            str(src), size, str(dst), cancel=stop, checkpoint=_stop_after(3, seen, stop), segment_bytes=seg
        )
    with open(dst, "r+b") as f:  # a bit flips in the second segment while the daemon is down
        f.seek(seg + 12345)
        b = f.read(1)
        f.seek(seg + 12345)
        f.write(bytes([b[0] ^ 1]))
    got: list[list[str]] = []
    sha = copy_and_hash(str(src), size, str(dst), resume=seen[-1], checkpoint=got.append, segment_bytes=seg)
    assert sha == hashlib.sha256(data).hexdigest() and dst.read_bytes() == data
    assert (
        got[0][:1] == seen[-1][:1] and len(got[0]) == 2
    )  # kept the first segment, re-copied from the second


def test_resuming_a_finished_copy_only_reads_it_back(tmp_path: Path) -> None:
    seg = 2 * CHUNK
    size = 3 * seg
    src, _ = _src(tmp_path, size)
    dst = tmp_path / "dst"
    dst.write_bytes(b"\0" * size)
    seen: list[list[str]] = []
    sha = copy_and_hash(str(src), size, str(dst), checkpoint=seen.append, segment_bytes=seg)
    src.write_bytes(b"x" * size)  # the source is never read again
    assert copy_and_hash(str(src), size, str(dst), resume=seen[-1], segment_bytes=seg) == sha
