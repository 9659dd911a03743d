"""An md array's name from its version-1.2 superblock on a local member, never from `mdadm`.

`mdadm --detail` reads the superblock of every member, so it hangs on an array whose remote leg
holds its I/O (replica legs attach without fast-fail: nodeos/agent/legs.py) — exactly when the
primary's agent must keep working. The superblock sits 4 KiB into each member: magic
0xa92b4efc, major version 1, set_uuid at byte 16, set_name (32 bytes, NUL padded) at byte 32.
Only local members (device-mapper: the node's own LVs) are read, with O_DIRECT so the page cache
cannot hand back a stale copy.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import uuid as uuidlib
from pathlib import Path

from nodeos.sysfs import read_attr, uuid_digits

SUPER_OFFSET = 4096
SUPER_MAGIC = 0xA92B4EFC
_BLOCK = 4096


def parse_name(raw: bytes, array_uuid: str) -> str | None:
    """Pure: the set name of a 1.x superblock `raw` (from its start) that belongs to the array
    whose sysfs md/uuid is `array_uuid`; None for anything else (no superblock, another array)."""
    if len(raw) < 64:
        return None
    magic, major = struct.unpack_from("<II", raw, 0)
    if magic != SUPER_MAGIC or major != 1:
        return None
    digits = uuid_digits(array_uuid)
    if uuidlib.UUID(bytes=bytes(raw[16:32])).hex != digits:
        return None  # a stale superblock of another array on this member
    return bytes(raw[32:64]).split(b"\0", 1)[0].decode("utf-8", "replace")


def _read_direct(path: str, offset: int = SUPER_OFFSET, size: int = _BLOCK) -> bytes:
    buf = mmap.mmap(-1, size)  # page aligned, as O_DIRECT wants
    try:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as err:
            if err.errno != errno.EINVAL:
                raise
            fd = os.open(path, os.O_RDONLY)  # a file system without O_DIRECT (tests); devices have it
        try:
            got = os.preadv(fd, [buf], offset)
        finally:
            os.close(fd)
        return bytes(buf[:got])
    finally:
        buf.close()


def _members(sys_block: Path, kname: str) -> list[str]:
    return [
        os.path.basename(os.path.realpath(d / "block"))
        for d in sorted((sys_block / kname / "md").glob("dev-*"))
    ]


def local_members(sys_block: Path, kname: str) -> list[str]:
    """The device-mapper members (dm-N) of md array `kname` not suspended (a suspended device
    holds reads too), by sysfs."""
    return [
        m
        for m in _members(sys_block, kname)
        if m.startswith("dm-") and read_attr(sys_block / m / "dm" / "suspended") != "1"
    ]


def members_answer(sys_block: Path, kname: str) -> bool:
    """No member of `kname` can hold a read: every NVMe member's controller is live and no
    device-mapper member is suspended (then `mdadm --detail` cannot hang on it)."""
    for m in _members(sys_block, kname):
        if m.startswith("nvme") and read_attr(sys_block / m / "device" / "state") != "live":
            return False
        if m.startswith("dm-") and read_attr(sys_block / m / "dm" / "suspended") == "1":
            return False
    return True


def array_name(sys_block: Path, kname: str, array_uuid: str, dev_dir: Path = Path("/dev")) -> str | None:
    """The name of md array `kname` read from a local member's superblock; None when no local
    member holds a readable superblock of this array (the caller decides what that means)."""
    for member in local_members(sys_block, kname):
        try:
            name = parse_name(_read_direct(str(dev_dir / member)), array_uuid)
        except OSError:
            continue
        if name is not None:
            return name
    return None
