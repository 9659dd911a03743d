"""The copy of a published volume (nodeos/node/pubcopy.py) on real files: every byte copied,
the sha256 of exactly the volume's bytes, progress to 1, the rate cap honoured, a cancel and a
short source refused (a copy is whole or nothing)."""

from __future__ import annotations

import hashlib
import os
import threading
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
