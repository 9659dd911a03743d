"""md raid1 mirrors and dm views, the pure parts: mdadm and dmsetup command lines, the md write
freeze attributes, `mdadm --export` output, dm tables, and a snapshot of /sys/block/mdX/md read as a
MirrorInfo. The edge that runs them: mirror.py (`MdMirrors`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodeos.dataplane.base import MirrorInfo, MirrorMember, MirrorSpec
from nodeos.dataplane.mirror_names import (
    MIRROR_BITMAP_CHUNK_KIB,
    SIZE_ALIGN,
    VIEW_PREFIX,
    check_mirror_id,
    check_mirror_shape,
    check_volume_size,
    mirror_uuid,
)
from nodeos.errors import BadInput
from nodeos.sysfs import uuid_digits

MD_DIR = Path("/dev/md")
SECTOR = 512


def md_path(mirror_id: str) -> str:
    return str(MD_DIR / check_mirror_id(mirror_id))


def check_device_path(dev: str, field: str = "members") -> str:
    if not isinstance(dev, str) or not dev.startswith("/dev/") or ".." in dev.split("/") or "," in dev:
        raise BadInput(f"{field}: {dev!r} is not a device path", field=field, allowed="/dev/...")
    return dev


def check_mirror_spec(spec: MirrorSpec) -> None:
    check_mirror_shape(spec, check_device_path)
    off = spec.data_offset_bytes
    if not isinstance(off, int) or isinstance(off, bool) or off < SIZE_ALIGN or off % SIZE_ALIGN:
        raise BadInput(
            f"data_offset_bytes {off!r} is not a whole number of MiB >= 1 MiB",
            field="data_offset_bytes",
            allowed="multiples of 1048576, at least 1048576",
        )


def cmd_create(spec: MirrorSpec, members: Sequence[str]) -> list[str]:
    """First assembly of brand-new, empty members only (--assume-clean skips the initial sync:
    thin LVs and fresh replicas read as zeros everywhere, so the legs are already equal)."""
    cmd = [
        "mdadm", "--create", md_path(spec.mirror_id), "--run", "--metadata=1.2", "--level=1",
        f"--raid-devices={len(members)}", "--bitmap=internal",
        f"--bitmap-chunk={MIRROR_BITMAP_CHUNK_KIB}", f"--data-offset={spec.data_offset_bytes // 1024}",
        f"--size={spec.size_bytes // 1024}", "--assume-clean", f"--name={spec.mirror_id}",
        "--homehost=<none>", f"--uuid={mirror_uuid(spec.mirror_id)}",
    ]  # fmt: skip
    if len(members) == 1:
        cmd.append("--force")  # mdadm wants it for a one-leg raid1
    return [*cmd, *members]


def freeze_writes_attrs(size_sectors: int) -> list[tuple[str, str]]:
    """md attributes (in /sys/block/mdX/md/, sectors) that block writes to the whole array:
    md drains the in-flight I/O at each store, then holds every write into [lo, hi) while
    reads pass. hi first: with lo at its default 0 the range is whole at once."""
    if not isinstance(size_sectors, int) or isinstance(size_sectors, bool) or size_sectors <= 0:
        raise BadInput(f"array size {size_sectors!r} is not a positive number of sectors", field="size")
    return [("suspend_hi", str(size_sectors)), ("suspend_lo", "0")]


# lo >= hi is an empty range: nothing is held any more (md wakes the waiting writes).
THAW_WRITES_ATTRS = [("suspend_hi", "0"), ("suspend_lo", "0")]


def writes_frozen(suspend_lo: str, suspend_hi: str) -> bool:
    try:
        return int(suspend_lo) < int(suspend_hi)
    except ValueError:
        return False


def cmd_assemble(mirror_id: str, members: Sequence[str]) -> list[str]:
    # --uuid: only members of this array are accepted; --run: start degraded if legs are missing.
    return ["mdadm", "--assemble", md_path(mirror_id), "--run", f"--uuid={mirror_uuid(mirror_id)}", *members]


def cmd_grow(md_device: str, size_bytes: int) -> list[str]:
    """Grow the array's data to `size_bytes` (KiB for mdadm); the new space is not resynced: every
    leg is a grown thin LV (or its namespace), which reads zeros there, so the legs agree."""
    check_volume_size(size_bytes)
    return ["mdadm", "--grow", md_device, f"--size={size_bytes // 1024}", "--assume-clean"]


def cmd_manage(md_device: str, op: str, dev: str) -> list[str]:
    return ["mdadm", md_device, f"--{op}", dev]


def cmd_stop(md_device: str) -> list[str]:
    return ["mdadm", "--stop", md_device]


def cmd_zero_superblock(dev: str) -> list[str]:
    """Wipe a stopped leg's md superblock (and with it its bitmap): the primary then adds it
    back with a full copy, never a bitmap catch-up (an ex-primary's leg may be a write ahead)."""
    return ["mdadm", "--zero-superblock", check_device_path(dev, "device")]


# `mdadm MD --remove failed|detached`: legs md marked faulty, and legs whose device node is gone
# (a vanished namespace cannot be named by its path any more).
CLEAR_KEYWORDS = ("failed", "detached")


def cmd_detail(kname: str) -> list[str]:
    return ["mdadm", "--detail", "--export", f"/dev/{kname}"]


def cmd_examine(dev: str) -> list[str]:
    return ["mdadm", "--examine", "--export", dev]


def parse_export(text: str) -> dict[str, str]:
    """`mdadm --examine/--detail --export` KEY=value lines."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep and k:
            out[k] = v.strip().strip("'\"")
    return out


def same_uuid(a: str, b: str) -> bool:
    return uuid_digits(a) == uuid_digits(b)


def view_name(view_id: str) -> str:
    if not view_id or not all(c.isalnum() or c in "-_." for c in view_id) or len(view_id) > 100:
        raise BadInput(
            f"view id {view_id!r} is not valid", field="view_id", allowed="1-100 of [A-Za-z0-9-_.]"
        )
    return VIEW_PREFIX + view_id


def linear_table(dev_majmin: str, offset_bytes: int, size_bytes: int) -> str:
    return f"0 {size_bytes // SECTOR} linear {dev_majmin} {offset_bytes // SECTOR}"


def read_only_table(dev_majmin: str, offset_bytes: int, size_bytes: int) -> str:
    """A view that reads `dev` like a linear one and fails every write with an I/O error, in
    the target itself: dm-flakey always "down" (up 0 s, down 1 s) with `error_writes`, which
    passes reads through untouched. A read-only dm table or block device would not do that, by
    the kernel's source: the block layer only warns about a write to a read-only device and
    lets the bio through (nvmet submits bios directly); not yet checked in the lab."""
    return f"0 {size_bytes // SECTOR} flakey {dev_majmin} {offset_bytes // SECTOR} 0 1 1 error_writes"


def error_table(size_bytes: int) -> str:
    """A view that holds no device: every I/O fails (the device it mapped is free again)."""
    return f"0 {size_bytes // SECTOR} error"


def check_view(offset_bytes: int, size_bytes: int) -> None:
    check_volume_size(size_bytes)
    if not isinstance(offset_bytes, int) or isinstance(offset_bytes, bool) or offset_bytes < 0:
        raise BadInput(f"offset_bytes {offset_bytes!r} is not a byte offset", field="offset_bytes")
    if offset_bytes % 4096:
        raise BadInput("offset_bytes is not 4 KiB aligned", field="offset_bytes", allowed="multiples of 4096")


def _sync_fraction(text: str) -> float | None:
    """md's sync_completed ("1024 / 2097152" sectors, or "none")."""
    done, sep, total = text.partition("/")
    try:
        d, t = int(done), int(total)
    except ValueError:
        return None
    return d / t if sep and t > 0 else None


def mirror_info(mirror_id: str, snap: dict[str, Any]) -> MirrorInfo:
    """A MirrorInfo from a snapshot of /sys/block/mdX/md (see MdMirrors.snapshot)."""
    raid_disks = int(snap.get("raid_disks") or 0)
    sync_action = snap.get("sync_action", "") or "idle"
    progress = _sync_fraction(snap.get("sync_completed", ""))
    by_slot: dict[int, MirrorMember] = {}
    others: list[MirrorMember] = []
    offset: int | None = None
    for _, d in sorted(snap.get("devs", {}).items()):
        flags = set(d.get("state", "").split(","))
        slot = int(d["slot"]) if str(d.get("slot", "")).isdigit() else None
        if offset is None and str(d.get("offset", "")).isdigit():
            offset = int(d["offset"]) * SECTOR
        dev = d.get("device")
        if "faulty" in flags:
            others.append(MirrorMember(slot=slot, device=dev, state="faulty"))
        elif slot is None:
            others.append(MirrorMember(slot=None, device=dev, state="spare"))
        elif "in_sync" in flags:
            by_slot[slot] = MirrorMember(slot=slot, device=dev, state="in_sync")
        else:
            busy = sync_action in ("recover", "resync", "repair")
            by_slot[slot] = MirrorMember(
                slot=slot, device=dev, state="rebuilding", progress=progress if busy else None
            )
    members = [
        by_slot.get(i) or MirrorMember(slot=i, device=None, state="missing") for i in range(raid_disks)
    ]
    # A faulty leg still holding its slot is reported once, as faulty.
    faulty_slots = {m.slot for m in others if m.state == "faulty" and m.slot is not None}
    members = [m for m in members if not (m.state == "missing" and m.slot in faulty_slots)]
    return MirrorInfo(
        mirror_id=mirror_id,
        device=md_path(mirror_id),
        size_bytes=int(snap.get("size_sectors") or 0) * SECTOR,
        degraded=int(snap.get("degraded") or 0) > 0,
        members=tuple(members + others),
        array_state=snap.get("array_state", "") or "",
        sync_action=sync_action,
        data_offset_bytes=offset,
    )
