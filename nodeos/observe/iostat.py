"""Volume I/O counters from the data plane's own accounting.

Kernel data plane: the exported block device's `/sys/block/<dev>/stat` (the kernel's
Documentation/block/stat.rst: sectors are always 512 bytes, times in milliseconds).
SPDK: `bdev_get_iostat` (times in ticks of `tick_rate` per second). Parsers are pure; the
readers are the thin edge. Both give {reads, writes, read_bytes, write_bytes, read_seconds,
write_seconds, in_flight}.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SECTOR = 512
SYS_BLOCK = Path("/sys/block")


def parse_block_stat(text: str) -> dict[str, float]:
    f = [int(x) for x in text.split()]
    if len(f) < 11:
        raise ValueError(f"block stat has {len(f)} fields, expected at least 11")
    return {
        "reads": f[0],
        "read_bytes": f[2] * SECTOR,
        "read_seconds": f[3] / 1000.0,
        "writes": f[4],
        "write_bytes": f[6] * SECTOR,
        "write_seconds": f[7] / 1000.0,
        "in_flight": f[8],
    }


def block_stat_path(device: str, sys_block: Path = SYS_BLOCK) -> Path:
    """`/dev/vg/lv` (a symlink to /dev/dm-3) -> /sys/block/dm-3/stat."""
    return sys_block / os.path.basename(os.path.realpath(device)) / "stat"


def read_block_stats(devices: dict[str, str], sys_block: Path = SYS_BLOCK) -> dict[str, dict[str, float]]:
    """{vol_id: device path} -> {vol_id: counters}; a device that vanished is left out."""
    out: dict[str, dict[str, float]] = {}
    for vol, dev in devices.items():
        try:
            out[vol] = parse_block_stat(block_stat_path(dev, sys_block).read_text())
        except (OSError, ValueError):
            continue
    return out


def parse_spdk_iostat(result: dict[str, Any], bdev_to_vol: dict[str, str]) -> dict[str, dict[str, float]]:
    """The result of SPDK's `bdev_get_iostat` -> {vol_id: counters} for the bdevs we know."""
    rate = float(result.get("tick_rate") or 0) or 1.0
    out: dict[str, dict[str, float]] = {}
    for b in result.get("bdevs") or []:
        vol = bdev_to_vol.get(str(b.get("name")))
        if vol is None:
            for alias in b.get("aliases") or []:
                vol = bdev_to_vol.get(str(alias))
                if vol is not None:
                    break
        if vol is None:
            continue
        out[vol] = {
            "reads": float(b.get("num_read_ops", 0)),
            "read_bytes": float(b.get("bytes_read", 0)),
            "read_seconds": float(b.get("read_latency_ticks", 0)) / rate,
            "writes": float(b.get("num_write_ops", 0)),
            "write_bytes": float(b.get("bytes_written", 0)),
            "write_seconds": float(b.get("write_latency_ticks", 0)) / rate,
            "in_flight": 0.0,  # bdev_get_iostat does not report a queue depth
        }
    return out
