"""The bytes of a published volume (issue 13): copy a whole device from a source replica's
namespace (attached over NVMe/TCP) into the local LV, or only read it, computing the sha256
of every byte on the way; throttled, with progress. Runs in a worker thread, off the data
plane queue: a copy of 100 GB must not hold up grants and failovers.

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
from collections.abc import Callable

CHUNK = 1 << 20  # 1 MiB per read: aligned for O_DIRECT (mmap memory is page aligned)


class Cancelled(Exception):
    pass


def _open(path: str, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_DIRECT)
    except OSError as err:
        if err.errno != 22:  # EINVAL: no O_DIRECT here
            raise
        return os.open(path, flags)


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
) -> str:
    """sha256 (hex) of the first `size_bytes` of `src`, writing them to `dst` when given.

    `limit_bps` caps the rate (the node's rebuild cap); `progress(0..1)` is called after
    each chunk; `cancel` set stops it (Cancelled). A short read (a device smaller than the
    volume) fails: a copy is whole or nothing."""
    h = hashlib.sha256()
    buf = mmap.mmap(-1, CHUNK)
    fin = _open(src, os.O_RDONLY)
    fout = _open(dst, os.O_WRONLY) if dst is not None else None
    start = clock()
    done = 0
    try:
        while done < size_bytes:
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"copy of {src} cancelled at {done} bytes")
            n = min(CHUNK, size_bytes - done)
            with memoryview(buf) as whole, whole[:n] as view:
                got = os.preadv(fin, [view], done)
                if got != n:
                    raise OSError(f"{src}: short read at {done} ({got} of {n} bytes)")
                h.update(view)
                if fout is not None:
                    wrote = os.pwritev(fout, [view], done)
                    if wrote != n:
                        raise OSError(f"{dst}: short write at {done} ({wrote} of {n} bytes)")
            done += n
            if progress is not None:
                progress(done / size_bytes)
            if limit_bps:
                ahead = done / limit_bps - (clock() - start)
                if ahead > 0:
                    sleep(ahead)
        if fout is not None:
            os.fsync(fout)
    finally:
        os.close(fin)
        if fout is not None:
            os.close(fout)
        buf.close()
    return h.hexdigest()
