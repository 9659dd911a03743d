"""The bytes of a published volume (issue 13): copy a whole device from a source replica's
namespace (attached over NVMe/TCP) into the local LV, or only read it, computing the sha256
of every byte on the way; throttled, with progress. Runs in a worker thread, off the data
plane queue: a copy of 100 GB must not hold up grants and failovers.

A copy is resumable: every `segment_bytes` it makes the copied prefix durable (fsync) and
hands the sha256 of each segment so far to `checkpoint` (the caller records them in the
node's store). A copy started again with those digests (`resume`) re-reads the prefix from
the local device instead of the source: each segment whose bytes still hash to its recorded
digest counts (and feeds the whole-volume sha256, whose state cannot be kept portably across
a restart), and the copy goes on from the first segment that does not (a prefix damaged
while the node was down is copied again, never trusted).

O_DIRECT on both sides (the page cache would keep a second copy of a model nobody reads
here, and the read must see the device, not a cached earlier copy); a file system that
refuses O_DIRECT (tmpfs, in tests) is read through the cache instead.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

CHUNK = 1 << 20  # 1 MiB per read: aligned for O_DIRECT (mmap memory is page aligned)
SEGMENT = 64 * CHUNK  # a checkpoint per 64 MiB: at most that much is copied again after a restart


class Cancelled(Exception):
    pass


def _open(path: str, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_DIRECT)
    except OSError as err:
        if err.errno != 22:  # EINVAL: no O_DIRECT here
            raise
        return os.open(path, flags)


def _read(fd: int, view: memoryview, offset: int, what: str) -> None:
    got = os.preadv(fd, [view], offset)
    if got != len(view):
        raise OSError(f"{what}: short read at {offset} ({got} of {len(view)} bytes)")


def _check_cancel(cancel: threading.Event | None, what: str, at: int) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"{what} cancelled at {at} bytes")


def _verified_prefix(
    fd: int,
    path: str,
    buf: mmap.mmap,
    size_bytes: int,
    segment_bytes: int,
    resume: Sequence[str],
    cancel: threading.Event | None,
) -> tuple[int, Any, list[str]]:
    """Re-read the local copy's recorded segments while each still matches its digest: the
    bytes that did, the whole-volume hash over them, their digests."""
    h = hashlib.sha256()
    done = 0
    kept: list[str] = []
    for digest in resume:
        end = min(done + segment_bytes, size_bytes)
        if end <= done:
            break
        seg, grown = hashlib.sha256(), h.copy()
        off = done
        while off < end:
            _check_cancel(cancel, f"re-read of {path}", off)
            n = min(CHUNK, end - off)
            with memoryview(buf) as whole, whole[:n] as view:
                _read(fd, view, off, path)
                grown.update(view)
                seg.update(view)
            off += n
        if seg.hexdigest() != digest:
            break  # damaged since it was copied: copied again from here
        h, done = grown, end
        kept.append(digest)
    return done, h, kept


def copy_and_hash(
    src: str,
    size_bytes: int,
    dst: str | None = None,
    *,
    limit_bps: int | None = None,
    progress: Callable[[float], None] | None = None,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    resume: Sequence[str] = (),
    checkpoint: Callable[[list[str]], None] | None = None,
    segment_bytes: int = SEGMENT,
) -> str:
    """sha256 (hex) of the first `size_bytes` of `src`, writing them to `dst` when given.

    `limit_bps` caps the rate (the node's rebuild cap); `progress(0..1)` is called after
    each chunk; `cancel` set stops it (Cancelled). A short read (a device smaller than the
    volume) fails: a copy is whole or nothing. With `dst`: `checkpoint(digests)` is called
    with the sha256 of every segment copied so far, each time one more is durable in `dst`;
    `resume` (digests an earlier copy checkpointed) skips the prefix of `dst` that still
    matches them, reading it back for the whole-volume sum instead of copying it."""
    if segment_bytes < CHUNK or segment_bytes % CHUNK:
        raise ValueError(f"segment_bytes must be a multiple of {CHUNK}, not {segment_bytes}")
    buf = mmap.mmap(-1, CHUNK)
    fin = _open(src, os.O_RDONLY)
    fout = _open(dst, os.O_RDWR) if dst is not None else None
    try:
        h, done, digests = hashlib.sha256(), 0, []
        if fout is not None and resume:
            done, h, digests = _verified_prefix(
                fout, str(dst), buf, size_bytes, segment_bytes, resume, cancel
            )
            if progress is not None and done:
                progress(done / size_bytes)
        seg = hashlib.sha256()
        start, first = clock(), done
        while done < size_bytes:
            _check_cancel(cancel, f"copy of {src}", done)
            n = min(CHUNK, size_bytes - done)
            with memoryview(buf) as whole, whole[:n] as view:
                _read(fin, view, done, src)
                h.update(view)
                seg.update(view)
                if fout is not None:
                    wrote = os.pwritev(fout, [view], done)
                    if wrote != n:
                        raise OSError(f"{dst}: short write at {done} ({wrote} of {n} bytes)")
            done += n
            if fout is not None and (done % segment_bytes == 0 or done == size_bytes):
                os.fsync(fout)
                digests.append(seg.hexdigest())
                seg = hashlib.sha256()
                if checkpoint is not None:
                    checkpoint(list(digests))
            if progress is not None:
                progress(done / size_bytes)
            if limit_bps:
                ahead = (done - first) / limit_bps - (clock() - start)
                if ahead > 0:
                    sleep(ahead)
    finally:
        os.close(fin)
        if fout is not None:
            os.close(fout)
        buf.close()
    return h.hexdigest()
