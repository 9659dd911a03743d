"""md raid1 mirrors of a volume over its local LV and replica namespaces, and linear views.

The control plane names the members, their order, the data offset and the array size; this
module never guesses them from superblocks. It only checks a member's superblock to refuse
creating over a foreign array (except the one `adopt_uuid` names: a clone's legs carry their
origin's superblock) and to finish a create that crashed after mdadm wrote it. Write freezes
(md's suspend range) hold a volume's writes while its replicas are snapshotted. Every array
is assembled with md's write serialization on (md_serial.py: a retried write's leg write never
lands under an older one's), before the front end exports it.
This is the edge (`MdMirrors`: runs mdadm/dmsetup, reads /sys/block/mdX/md); the pure parts
(command lines, output parsing, md sysfs snapshot -> MirrorInfo) are in md_commands.py.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from nodeos.bounded_run import run_bounded
from nodeos.dataplane.base import MirrorInfo, MirrorSpec
from nodeos.dataplane.kernel import md_serial, md_super
from nodeos.dataplane.kernel.holders import PROC, holders_of
from nodeos.dataplane.kernel.md_commands import (
    CLEAR_KEYWORDS,
    MD_DIR,
    THAW_WRITES_ATTRS,
    check_device_path,
    check_mirror_spec,
    check_view,
    cmd_assemble,
    cmd_create,
    cmd_detail,
    cmd_examine,
    cmd_grow,
    cmd_manage,
    cmd_stop,
    cmd_zero_superblock,
    error_table,
    freeze_writes_attrs,
    linear_table,
    mirror_info,
    parse_export,
    read_only_table,
    same_uuid,
    view_name,
    writes_frozen,
)
from nodeos.dataplane.mirror_names import MIRROR_PREFIX, check_mirror_id, check_volume_size, mirror_uuid
from nodeos.errors import BadInput, NotFound, OperationFailed
from nodeos.sysfs import read_attr

RAID_SPEED_MAX = Path("/proc/sys/dev/raid/speed_limit_max")
RAID_SPEED_DEFAULT_KIB = 200_000  # the kernel's own default
# md's floor: while an array has other I/O, md holds its resync to speed_limit_min, 1,000 KiB/s
# by default. Hosts that write all the time (training) would keep a rebuild there: a 1 TB replica
# degraded for 12 days. The node's floor is 50 MB/s (or its cap, when that is lower): a 1 TB copy
# within 6 h under any host load, a small share of an NVMe drive's bandwidth.
RAID_SPEED_MIN = Path("/proc/sys/dev/raid/speed_limit_min")
RAID_SPEED_FLOOR_KIB = 50_000
SYS_BLOCK = Path("/sys/block")
FAIL_WAIT_S = 3.0  # how long drop_mirror_leg waits for md to mark a blocked leg faulty


def run(cmd: Sequence[str], timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    pkg = "mdadm" if cmd[0] == "mdadm" else "dmsetup"
    p = run_bounded(cmd, timeout_s, dict(os.environ, LC_ALL="C"), package=pkg)
    if check and p.returncode != 0:
        lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
        raise OperationFailed(f"{' '.join(cmd[:3])} failed: {'; '.join(lines[-3:]) or p.returncode}")
    return p


def _mark_faulty(state: Path, done: threading.Event) -> None:
    with contextlib.suppress(OSError):
        state.write_text("faulty")
    done.set()


# md block nodes of our own, where /dev/<mdN> is not the device (see _block_node).
NODE_DIR = Path("/run/nodeos/md-nodes")


def _is_node(path: Path, majmin: str) -> bool:
    """`path` is the block device `majmin` ("9:127"), not a file or another device."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    rdev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    return stat.S_ISBLK(st.st_mode) and rdev == majmin


class MdMirrors:
    def __init__(
        self,
        md_dir: Path = MD_DIR,
        sys_block: Path = SYS_BLOCK,
        dev_dir: Path = Path("/dev"),
        runner: Callable[..., subprocess.CompletedProcess[str]] = run,
        sleep: Callable[[float], None] = time.sleep,
        node_dir: Path = NODE_DIR,
        proc_dir: Path = PROC,
    ) -> None:
        self.md_dir = md_dir
        self.proc_dir = proc_dir
        self.sys_block = sys_block
        self.dev_dir = dev_dir
        self.node_dir = node_dir
        self.run = runner
        self.sleep = sleep
        self.serializer = md_serial.WriteSerializer()

    def _arrays(self) -> dict[str, str]:
        """md kernel name -> array uuid (md/uuid, kernel >= 6.x), for every md device."""
        out = {}
        for p in sorted(self.sys_block.glob("md*")):
            u = read_attr(p / "md" / "uuid")
            if u:
                out[p.name] = u
        return out

    def _kname(self, mirror_id: str) -> str | None:
        # By the array uuid, fixed by the mirror id: no reliance on udev's /dev/md/<name> link.
        want = mirror_uuid(mirror_id)
        return next((k for k, u in self._arrays().items() if same_uuid(u, want)), None)

    def _md_device(self, mirror_id: str, kname: str) -> str:
        link = self.md_dir / mirror_id
        node = self._block_node(kname)
        if os.path.realpath(link) == os.path.realpath(node) == f"/dev/{kname}":
            return str(link)
        return node  # udev has not made the link (yet), or /dev/<kname> is not md's node

    def _block_node(self, kname: str) -> str:
        """A path that is md's own block device `kname`: /dev/<kname> when it is that device
        (major:minor as sysfs says), else a node of our own under node_dir. Seen in the lab: a
        `dd of=/dev/md127` that outlived its array left a regular file there, devtmpfs could not
        make the next md127's node, nvmet exported the file (its file backend: the host's
        writes never reached md) and `mdadm --stop /dev/md127` failed, so the volume's delete
        retried for ever."""
        want = read_attr(self.sys_block / kname / "dev")  # "9:127"
        path = self.dev_dir / kname
        if not want:
            return f"/dev/{kname}"
        if _is_node(path, want):
            return str(path)
        own = self.node_dir / kname
        if not _is_node(own, want):
            own.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(FileNotFoundError):
                own.unlink()
            major, minor = (int(x) for x in want.split(":"))
            os.mknod(own, 0o600 | stat.S_IFBLK, os.makedev(major, minor))
        return str(own)

    def _dev_name(self, kname: str) -> str:
        dm = read_attr(self.sys_block / kname / "dm" / "name")
        return f"/dev/mapper/{dm}" if dm else f"/dev/{kname}"

    def snapshot(self, kname: str) -> dict[str, Any]:
        md = self.sys_block / kname / "md"
        snap: dict[str, Any] = {
            k: read_attr(md / k)
            for k in ("array_state", "degraded", "raid_disks", "sync_action", "sync_completed")
        }
        snap["size_sectors"] = read_attr(self.sys_block / kname / "size")
        devs: dict[str, dict[str, str]] = {}
        for d in sorted(md.glob("dev-*")):
            block = os.path.basename(os.path.realpath(d / "block"))
            devs[d.name] = {
                "state": read_attr(d / "state"),
                "slot": read_attr(d / "slot"),
                "offset": read_attr(d / "offset"),
                "device": self._dev_name(block),
            }
        snap["devs"] = devs
        return snap

    def status(self, mirror_id: str) -> MirrorInfo | None:
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        if kname is None or read_attr(self.sys_block / kname / "md" / "array_state") in (
            "",
            "clear",
            "inactive",
        ):
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

    def set_rebuild_limit(
        self, kib_per_s: int | None, path: Path = RAID_SPEED_MAX, min_path: Path = RAID_SPEED_MIN
    ) -> None:
        """md's resync/recovery cap for the whole node, and its floor under other I/O (the
        floor, or the cap when lower: RAID_SPEED_FLOOR_KIB); each read back so a refused value
        shows."""
        want = RAID_SPEED_DEFAULT_KIB if kib_per_s is None else int(kib_per_s)
        if want <= 0:
            raise BadInput("the rebuild limit must be positive", field="rebuild_mbps")
        floor = min(want, RAID_SPEED_FLOOR_KIB)
        # The floor first when it falls, the cap first when it rises: never a floor above the cap.
        order = [(min_path, floor), (path, want)]
        if floor > int(read_attr(min_path) or 0):
            order.reverse()
        for where, value in order:
            where.write_text(f"{value}\n")
            got = read_attr(where)
            if got != str(value):
                raise OperationFailed(f"{where} reads {got!r} after writing {value}", field="rebuild_mbps")

    def stop(self, mirror_id: str) -> None:
        check_mirror_id(mirror_id)
        kname = self._kname(mirror_id)
        if kname is None:
            return
        try:
            self.run(cmd_stop(self._block_node(kname)))
        except OperationFailed as e:
            held = holders_of(kname, self.sys_block, self.proc_dir) if "busy" in str(e).lower() else []
            if not held:
                raise
            raise OperationFailed(f"{e} (held open by {', '.join(held)})") from e

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
        for attr, value in freeze_writes_attrs(int(read_attr(blk / "size") or 0)):
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
        return writes_frozen(read_attr(md / "suspend_lo"), read_attr(md / "suspend_hi"))

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
                self.run(cmd_stop(self._block_node(kname)), check=False)  # an inactive leftover holds members
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
        info = self._reconcile_members(spec, info)
        self.serializer.ensure(self._md_dir_of(spec.mirror_id) / "md", spec.mirror_id)
        return info

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
        adds = [dev for real, dev in want.items() if real not in have and os.path.exists(dev)]
        if adds:
            with self._adding_members(spec.mirror_id):
                for dev in adds:
                    # re-add: a leg that left in sync catches up from the bitmap; else a full rebuild.
                    if self.run(cmd_manage(info.device, "re-add", dev), check=False).returncode != 0:
                        self.run(cmd_manage(info.device, "add", dev))
        return self._wait_status(spec.mirror_id)

    @contextlib.contextmanager
    def _adding_members(self, mirror_id: str) -> Iterator[None]:
        """Members are added to a serialized array with its writes held and serialization off,
        turned on again (for every member) before the writes flow: md_serial.py says why."""
        md = self._md_dir_of(mirror_id) / "md"
        if not md_serial.writes_serialized(read_attr(md / md_serial.SERIALIZE_ATTR)):
            yield
            return
        held = self.writes_frozen(mirror_id)  # a snapshot's freeze: left as it is
        if not held:
            self.freeze_writes(mirror_id)
        try:
            self.serializer.disable(md, mirror_id)
            try:
                yield
            finally:
                self.serializer.ensure(md, mirror_id)
        finally:
            if not held:
                self.thaw_writes(mirror_id)

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
        """Zero a leg's md superblock; nothing to do when it has none. A leg whose device is
        missing (its drive pulled) is an error, not "no superblock": the step that asked for
        the wipe fails and is tried again once the device is back, never skipped past."""
        check_device_path(dev, "device")
        if not os.path.exists(dev):
            raise NotFound(f"leg device {dev} is missing: its superblock cannot be wiped", field="device")
        if self._examine(dev).get("MD_UUID"):
            self.run(cmd_zero_superblock(dev))

    def remove_view(self, view_id: str) -> None:
        name = view_name(view_id)
        if self.run(["dmsetup", "info", name], check=False).returncode != 0:
            return
        self.run(["dmsetup", "remove", name])
