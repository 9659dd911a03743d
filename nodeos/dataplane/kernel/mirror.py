"""md raid1 mirrors of a volume over its local LV and replica namespaces, and linear views.

The control plane names the members, their order, the data offset and the array size; this
module never guesses them from superblocks. It only checks a member's superblock to refuse
creating over a foreign array (except the one `adopt_uuid` names: a clone's legs carry their
origin's superblock) and to finish a create that crashed after mdadm wrote it. Write freezes
(md's suspend range) hold a volume's writes while its replicas are snapshotted.
Pure parts first (mdadm/dmsetup command lines, md sysfs snapshot -> MirrorInfo), then the
edge (`MdMirrors`: runs mdadm/dmsetup, reads /sys/block/mdX/md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from nodeos.dataplane.base import MirrorInfo, MirrorMember, MirrorSpec
from nodeos.dataplane.kernel import md_super
from nodeos.dataplane.mirror_names import (
    MIRROR_BITMAP_CHUNK_KIB,
    MIRROR_PREFIX,
    SIZE_ALIGN,
    VIEW_PREFIX,
    check_mirror_id,
    check_mirror_shape,
    check_volume_size,
    mirror_uuid,
)
from nodeos.errors import BadInput, EnvironmentProblem, NotFound, OperationFailed

MD_DIR = Path("/dev/md")
RAID_SPEED_MAX = Path("/proc/sys/dev/raid/speed_limit_max")
RAID_SPEED_DEFAULT_KIB = 200_000  # the kernel's own default
SYS_BLOCK = Path("/sys/block")
SECTOR = 512
FAIL_WAIT_S = 3.0  # how long drop_mirror_leg waits for md to mark a blocked leg faulty


# ---- pure -----------------------------------------------------------------------------
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
    """md prints uuids as 8:8:8:8 hex; compare digits only."""
    return a.replace(":", "").replace("-", "").lower() == b.replace(":", "").replace("-", "").lower()


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


# ---- edge -----------------------------------------------------------------------------
def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return ""


def run(cmd: Sequence[str], timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        p = subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=dict(os.environ, LC_ALL="C"),
        )
    except FileNotFoundError:
        pkg = "mdadm" if cmd[0] == "mdadm" else "dmsetup"
        raise EnvironmentProblem(f"{cmd[0]} is not installed (package {pkg})") from None
    except subprocess.TimeoutExpired:
        raise OperationFailed(f"{' '.join(cmd[:2])} did not finish within {timeout_s:.0f} s") from None
    if check and p.returncode != 0:
        lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
        raise OperationFailed(f"{' '.join(cmd[:3])} failed: {'; '.join(lines[-3:]) or p.returncode}")
    return p


def _mark_faulty(state: Path, done: threading.Event) -> None:
    with contextlib.suppress(OSError):
        state.write_text("faulty")
    done.set()


class MdMirrors:
    def __init__(
        self,
        md_dir: Path = MD_DIR,
        sys_block: Path = SYS_BLOCK,
        dev_dir: Path = Path("/dev"),
        runner: Callable[..., subprocess.CompletedProcess[str]] = run,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.md_dir = md_dir
        self.sys_block = sys_block
        self.dev_dir = dev_dir
        self.run = runner
        self.sleep = sleep

    def _arrays(self) -> dict[str, str]:
        """md kernel name -> array uuid (md/uuid, kernel >= 6.x), for every md device."""
        out = {}
        for p in sorted(self.sys_block.glob("md*")):
            u = _read(p / "md" / "uuid")
            if u:
                out[p.name] = u
        return out

    def _kname(self, mirror_id: str) -> str | None:
        # By the array uuid, fixed by the mirror id: no reliance on udev's /dev/md/<name> link.
        want = mirror_uuid(mirror_id)
        return next((k for k, u in self._arrays().items() if same_uuid(u, want)), None)

    def _md_device(self, mirror_id: str, kname: str) -> str:
        link = self.md_dir / mirror_id
        if os.path.realpath(link) == f"/dev/{kname}":
            return str(link)
        return f"/dev/{kname}"  # udev has not made the link (yet)

    def _dev_name(self, kname: str) -> str:
        dm = _read(self.sys_block / kname / "dm" / "name")
        return f"/dev/mapper/{dm}" if dm else f"/dev/{kname}"

    def snapshot(self, kname: str) -> dict[str, Any]:
        md = self.sys_block / kname / "md"
        snap: dict[str, Any] = {
            k: _read(md / k)
            for k in ("array_state", "degraded", "raid_disks", "sync_action", "sync_completed")
        }
        snap["size_sectors"] = _read(self.sys_block / kname / "size")
        devs: dict[str, dict[str, str]] = {}
        for d in sorted(md.glob("dev-*")):
            block = os.path.basename(os.path.realpath(d / "block"))
            devs[d.name] = {
                "state": _read(d / "state"),
                "slot": _read(d / "slot"),
                "offset": _read(d / "offset"),
                "device": self._dev_name(block),
            }
        snap["devs"] = devs
        return snap

    def status(self, mirror_id: str) -> MirrorInfo | None:
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        if kname is None or _read(self.sys_block / kname / "md" / "array_state") in ("", "clear", "inactive"):
            return None
        info = mirror_info(mirror_id, self.snapshot(kname))
        return replace(info, device=self._md_device(mirror_id, kname))

    def list(self) -> list[MirrorInfo]:
        out = []
        for kname, array_uuid in self._arrays().items():
            name = md_super.array_name(self.sys_block, kname, array_uuid, self.dev_dir)
            if name is None:  # no local member to read it from: mdadm reads every member's
                if not md_super.members_answer(self.sys_block, kname):
                    raise OperationFailed(
                        f"md array {kname}: no readable local member and a leg that holds its I/O: "
                        "its name is not read now (mdadm would hang on that leg)"
                    )
                name = parse_export(self.run(cmd_detail(kname), check=False).stdout).get("MD_NAME", "")
            if not name.startswith(MIRROR_PREFIX):
                continue
            try:
                info = self.status(name)
            except BadInput:
                continue  # another md array with a look-alike name: not ours
            if info is not None:
                out.append(info)
        return out

    def set_rebuild_limit(self, kib_per_s: int | None, path: Path = RAID_SPEED_MAX) -> None:
        """md's resync/recovery cap for the whole node (md slows further under other I/O,
        down to speed_limit_min); read back so a refused value shows."""
        want = RAID_SPEED_DEFAULT_KIB if kib_per_s is None else int(kib_per_s)
        if want <= 0:
            raise BadInput("the rebuild limit must be positive", field="rebuild_mbps")
        path.write_text(f"{want}\n")
        got = _read(path)
        if got != str(want):
            raise OperationFailed(f"{path} reads {got!r} after writing {want}", field="rebuild_mbps")

    def stop(self, mirror_id: str) -> None:
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        if kname is None:
            return
        self.run(cmd_stop(f"/dev/{kname}"))

    def grow(self, mirror_id: str, size_bytes: int) -> MirrorInfo:
        """The running array grown to `size_bytes` of data (nothing to do when it is that big)."""
        check_mirror_id(mirror_id)
        info = self.status(mirror_id)
        if info is None:
            raise NotFound(f"mirror {mirror_id} is not running", field="mirror_id")
        if info.size_bytes < size_bytes:
            self.run(cmd_grow(info.device, size_bytes))
            info = self._wait_status(mirror_id)
        if info.size_bytes < size_bytes:
            raise OperationFailed(
                f"mirror {mirror_id} holds {info.size_bytes} bytes after growing to {size_bytes}",
                field="size",
            )
        return info

    def fail_member(self, mirror_id: str, device: str, wait_s: float = FAIL_WAIT_S) -> bool:
        """Mark the leg on `device` faulty (md's dev-*/state <- faulty) without waiting more than
        `wait_s`: md takes its lock for it, which a superblock write blocked on that very leg may
        hold; the write then finishes once the leg's I/O fails. False: not (yet) marked."""
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        want = os.path.basename(os.path.realpath(device))
        if kname is None:
            return False
        for d in sorted((self.sys_block / kname / "md").glob("dev-*")):
            if os.path.basename(os.path.realpath(d / "block")) != want and d.name != f"dev-{want}":
                continue
            done = threading.Event()
            threading.Thread(
                target=_mark_faulty, args=(d / "state", done), name=f"md-fail-{want}", daemon=True
            ).start()
            return done.wait(wait_s)
        return False

    def _md_dir_of(self, mirror_id: str) -> Path:
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        if kname is None:
            raise NotFound(f"mirror {mirror_id} is not assembled", field="mirror_id")
        return self.sys_block / kname

    def freeze_writes(self, mirror_id: str) -> None:
        blk = self._md_dir_of(mirror_id)
        for attr, value in freeze_writes_attrs(int(_read(blk / "size") or 0)):
            (blk / "md" / attr).write_text(value)  # returns once md drained the in-flight I/O

    def thaw_writes(self, mirror_id: str) -> None:
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        if kname is None:
            return  # no array, nothing held
        for attr, value in THAW_WRITES_ATTRS:
            (self.sys_block / kname / "md" / attr).write_text(value)

    def writes_frozen(self, mirror_id: str) -> bool:
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        if kname is None:
            return False
        md = self.sys_block / kname / "md"
        return writes_frozen(_read(md / "suspend_lo"), _read(md / "suspend_hi"))

    def _examine(self, dev: str) -> dict[str, str]:
        p = self.run(cmd_examine(dev), check=False)
        return parse_export(p.stdout) if p.returncode == 0 else {}

    def assemble(self, spec: MirrorSpec) -> MirrorInfo:
        check_mirror_spec(spec)
        present = [m for m in spec.members if os.path.exists(m)]
        info = self.status(spec.mirror_id)
        if info is None:
            kname = self._kname(spec.mirror_id)
            if kname is not None:
                self.run(cmd_stop(f"/dev/{kname}"), check=False)  # an inactive leftover holds members
            if spec.create and self._create_is_new(spec, present):
                self.run(cmd_create(spec, present))
            else:
                if not present:
                    raise NotFound(f"no member of mirror {spec.mirror_id} is present", field="members")
                self.run(cmd_assemble(spec.mirror_id, present))
            info = self._wait_status(spec.mirror_id)
        if info.size_bytes != spec.size_bytes:
            raise OperationFailed(
                f"mirror {spec.mirror_id} is {info.size_bytes} bytes, not {spec.size_bytes}",
                field="size_bytes",
            )
        return self._reconcile_members(spec, info)

    def _create_is_new(self, spec: MirrorSpec, present: list[str]) -> bool:
        missing = [m for m in spec.members if m not in present]
        if missing:
            raise NotFound(f"cannot create mirror {spec.mirror_id}: {missing[0]} is missing", field="members")
        ours = 0
        for m in present:
            sb = self._examine(m)
            if not sb.get("MD_UUID"):
                continue
            if not same_uuid(sb["MD_UUID"], mirror_uuid(spec.mirror_id)):
                if spec.adopt_uuid and same_uuid(sb["MD_UUID"], spec.adopt_uuid):
                    continue  # a clone's leg: its origin's superblock, replaced by the create
                raise OperationFailed(
                    f"{m} holds another md array ({sb.get('MD_NAME', sb['MD_UUID'])}); "
                    "refusing to create over it",
                    field="members",
                )
            ours += 1
        # A create that crashed after mdadm wrote the superblocks is finished by assembling.
        return ours == 0

    def _wait_status(self, mirror_id: str, timeout_s: float = 30.0) -> MirrorInfo:
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.status(mirror_id)  # /dev/md/<id> is udev's link: it may lag mdadm a little
            if info is not None:
                return info
            if time.monotonic() > deadline:
                raise OperationFailed(f"mirror {mirror_id} did not start within {timeout_s:.0f} s")
            self.sleep(0.2)

    def _reconcile_members(self, spec: MirrorSpec, info: MirrorInfo) -> MirrorInfo:
        want = {os.path.realpath(m): m for m in spec.members}
        if any(m.state == "faulty" or (m.device and not os.path.exists(m.device)) for m in info.members):
            for kw in CLEAR_KEYWORDS:
                self.run(cmd_manage(info.device, "remove", kw), check=False)
            info = self._wait_status(spec.mirror_id)
        for m in info.members:
            if m.device and (m.state == "faulty" or os.path.realpath(m.device) not in want):
                if m.state != "faulty":
                    self.run(cmd_manage(info.device, "fail", m.device))
                self.run(cmd_manage(info.device, "remove", m.device))
        info = self._wait_status(spec.mirror_id)
        have = {os.path.realpath(m.device) for m in info.members if m.device}
        for real, dev in want.items():
            if real in have or not os.path.exists(dev):
                continue
            # re-add: a leg that left in sync catches up from the bitmap; else a full rebuild.
            if self.run(cmd_manage(info.device, "re-add", dev), check=False).returncode != 0:
                self.run(cmd_manage(info.device, "add", dev))
        return self._wait_status(spec.mirror_id)

    # ---- linear views (dm-linear) ------------------------------------------------------
    def ensure_view(
        self, view_id: str, device: str, offset_bytes: int, size_bytes: int, read_only: bool = False
    ) -> str:
        """A linear view of `device`; `read_only`: created read-only (a published volume's, whose
        table never changes: kept as it is once there)."""
        name = view_name(view_id)
        check_device_path(device, "device")
        check_view(offset_bytes, size_bytes)
        try:
            st = os.stat(device)
        except FileNotFoundError:
            raise NotFound(f"device {device} does not exist", field="device") from None
        majmin = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        table = (read_only_table if read_only else linear_table)(majmin, offset_bytes, size_bytes)
        cur = self.run(["dmsetup", "table", name], check=False)
        if cur.returncode != 0:
            if read_only:
                self.run(["modprobe", "dm-flakey"], check=False)
            self.run(["dmsetup", "create", name, "--table", table])
        elif cur.stdout.strip() != table and not read_only:
            # A live table swap: the exported device keeps its identity.
            self.run(["dmsetup", "reload", name, "--table", table])
            self.run(["dmsetup", "resume", name])
        return f"/dev/mapper/{name}"

    def block_view(self, view_id: str, size_bytes: int) -> str:
        """Swap the view's table for an `error` one: the view (and the export on it) stays, the
        device it mapped is released (md needs its members exclusively)."""
        name = view_name(view_id)
        check_volume_size(size_bytes)
        table = error_table(size_bytes)
        cur = self.run(["dmsetup", "table", name], check=False)
        if cur.returncode != 0:
            self.run(["dmsetup", "create", name, "--table", table])
        elif cur.stdout.strip() != table:
            self.run(["dmsetup", "reload", name, "--table", table])
            self.run(["dmsetup", "resume", name])
        return f"/dev/mapper/{name}"

    def wipe_member(self, dev: str) -> None:
        """Zero a leg's md superblock; nothing to do when it has none."""
        check_device_path(dev, "device")
        if self._examine(dev).get("MD_UUID"):
            self.run(cmd_zero_superblock(dev))

    def remove_view(self, view_id: str) -> None:
        name = view_name(view_id)
        if self.run(["dmsetup", "info", name], check=False).returncode != 0:
            return
        self.run(["dmsetup", "remove", name])
