"""The VM lab: storage VMs (s1..sN) and GPU-node VMs (h1..hM) on a private bridge.

State lives in a directory per lab name (state.json, per-VM sockets, consoles and drives), so
each `nodeos-lab` invocation is a separate process: `up` returns, later `exec`, `kill`, ...
read the state back. A lock file serialises changes to one lab.

    lab = Lab("default")
    lab.up(storage=1, drives=2, hosts=1)
    r = lab.exec("s1", ["nvme", "list", "-o", "json"])
    lab.addr("s1")  # '198.18.x.11'
    lab.down()
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from nodeos.errors import AlreadyExists, BadInput, EnvironmentProblem, NotFound, OperationFailed
from nodeos_devtools.lab import coldboot, diskboot, netns, qemu, qmp
from nodeos_devtools.lab import image as image_mod
from nodeos_devtools.lab.plan import check_counts, cluster_labels, plan_vms, storage_names, subnet_of
from nodeos_devtools.lab.qemu import VmSpec
from nodeos_devtools.lab.vm_access import VmAccess


class Lab(VmAccess):
    """One named lab: its lifecycle (up, down, start, kill), drives (unplug, plug, SMART) and network
    (cut, heal). State and queries: nodeos_devtools.lab.state; commands in the VMs:
    nodeos_devtools.lab.vm_access."""

    # ---- lifecycle ----------------------------------------------------------------------
    def up(
        self,
        storage: int = 1,
        drives: int = 2,
        hosts: int = 1,
        *,
        drive_size_mib: int = 1024,
        qemu_bin: str | None = None,
        kernel: Path | None = None,
        wait: bool = True,
        cluster: bool = False,
        labels: list[str] | None = None,
        boot: str = "kernel",
        provision: list[str] | None = None,
    ) -> dict[str, Any]:
        """Boot the lab and return when every VM is ready; on any failure nothing is left.

        cluster: form the storage VMs into one cluster (s1 inits, the others join) and label
        them: `labels` as VM:KEY=VALUE strings, None for the default rack=a, b, c..., [] for none.
        boot: "kernel" (the image's kernel and shared root, snapshot) or "disk" (storage VMs boot
        their own copy of the raw A/B disk under OVMF); provision: VM=FILE, a storage VM's
        configuration as its systemd credential (tests/tooling/nodeos_devtools/lab/diskboot.py)."""
        check_counts(storage, drives, hosts, drive_size_mib)
        diskboot.check_boot(boot)
        if cluster and not wait:
            raise BadInput("forming a cluster needs the VMs up: wait=True", field="wait")
        names = storage_names(storage)
        given = diskboot.parse_provision(provision or [], names)
        member_labels = cluster_labels(cluster, labels, names)
        if member_labels:
            from nodeos_devtools.lab.cluster import need_label_command

            need_label_command()  # before anything boots
        if os.geteuid() != 0:
            raise EnvironmentProblem("the lab needs root (network namespaces, taps)")
        with self._locked():
            if self.is_abandoned():
                self.progress(
                    f"lab {self.name}: left with no VM running (their QEMUs were killed): taken down"
                )
                self._down_locked()
            if self.is_up():
                raise AlreadyExists(f"lab {self.name!r} is already up (use another --name, or down first)",
                                    field="name")  # fmt: skip
            qemu_path = qemu.find_qemu(qemu_bin)
            if kernel is not None and not Path(kernel).is_file():
                raise EnvironmentProblem(f"kernel {kernel} does not exist")
            img = image_mod.build_image(self.progress, raw=boot == "disk")
            kernel_path = Path(kernel) if kernel else img.kernel
            for p in (kernel_path, img.initrd, img.rootfs):
                if not p.is_file():
                    raise EnvironmentProblem(f"image file missing: {p} (rebuild with `nodeos-lab image`)")
            try:
                self._up_locked(storage, drives, hosts, drive_size_mib, qemu_path, kernel_path, img, wait,
                                boot, given)  # fmt: skip
                if cluster:
                    self._form_cluster(names, member_labels)
            except BaseException:
                self.collect(self.failed_dir)
                self.progress(
                    f"up failed: removing everything it started (consoles kept in {self.failed_dir})"
                )
                self._down_locked()
                raise
        return self.status()

    def _form_cluster(self, names: list[str], labels: dict[str, dict[str, str]]) -> None:
        from nodeos_devtools.lab import cluster as cluster_mod

        cluster_mod.form(self, names, labels, self.progress)
        st = self._load()
        st["cluster"] = {"members": names, "labels": labels}
        self._save(st)

    def _up_locked(
        self,
        storage: int,
        drives: int,
        hosts: int,
        drive_size_mib: int,
        qemu_path: str,
        kernel: Path,
        img: image_mod.Image,
        wait: bool,
        boot: str = "kernel",
        given: dict[str, Path] | None = None,
    ) -> None:
        with self._global_lock():
            subnet = self._pick_subnet()
            self.dir.mkdir(parents=True, exist_ok=True)
            drive_dir = self.dir / "drives"
            vms = plan_vms(self.name, subnet, storage, drives, hosts, drive_dir)
            accel = qemu.choose_accel(qemu_path, kernel)
            st: dict[str, Any] = {
                "name": self.name,
                "subnet": subnet,
                "accel": accel,
                "qemu": qemu_path,
                "image": str(img.dir),
                "kernel": str(kernel),
                "initrd": str(img.initrd),
                "rootfs": str(img.rootfs),
                "has_daemon": img.has_daemon,
                "boot": boot,
                "disk": str(img.raw) if boot == "disk" else None,
                "vms": {v.name: v for v in vms},
            }
            self._save(st)
        self.progress(f"lab {self.name}: {storage} storage VM(s) x {drives} drive(s), {hosts} host(s), "
                      f"{accel.upper()}, network {subnet_of(subnet)}.0/24 in netns {self.ns}")  # fmt: skip
        if netns.exists(self.ns):
            netns.delete(self.ns)  # a leftover of a crashed run of this same lab
        netns.create(self.ns, f"{subnet_of(subnet)}.1/24")
        drive_dir.mkdir(exist_ok=True)
        for v in vms:
            for d in v.drives:
                with open(d["path"], "wb") as f:
                    f.truncate(drive_size_mib * 1024 * 1024)
            if v.role == "storage" and boot == "disk":
                diskboot.prepare(v, self.vm_dir(v.name), img.raw, (given or {}).get(v.name))
            elif v.role == "storage":
                if v.name in (given or {}):
                    diskboot.write_provision(v, self.vm_dir(v.name), (given or {})[v.name])
                # The root file system is a fresh snapshot at every boot, but an appliance keeps
                # nodeosd's state (LMDB) across power cycles: it gets a disk of its own.
                qemu.make_state_disk(self.vm_dir(v.name) / qemu.STATE_DISK)
        for v in vms:
            self._start_vm(st, v)
            self._save(st)
        if wait:
            self._wait_ready(st, [v.name for v in vms])

    def _start_vm(self, st: dict[str, Any], v: VmSpec) -> None:
        d = self.vm_dir(v.name)
        d.mkdir(parents=True, exist_ok=True)
        for sock in ("qga.sock", "qmp.sock"):
            (d / sock).unlink(missing_ok=True)
        tap = netns.tap_name(v.name)
        netns.add_tap(self.ns, tap)
        netns.set_tap(self.ns, tap, not v.cut)
        disk_boot = st.get("boot") == "disk" and v.role == "storage"
        argv = qemu.command_line(
            st["qemu"], v, accel=st["accel"], kernel=Path(st["kernel"]), initrd=Path(st["initrd"]),
            rootfs=Path(st["rootfs"]), vm_dir=d, tap=tap, tag=self._tag(v.name), disk_boot=disk_boot,
        )  # fmt: skip
        if disk_boot:  # its reboots are cold starts (OVMF's in-place reset can hang under TCG)
            argv = coldboot.wrap(argv, d)
        with open(d / "console.log", "ab") as f:
            f.write(f"\n===== nodeos-lab: starting {v.name} at {time.strftime('%F %T')} =====\n".encode())
        v.pid = qemu.start(argv, self.ns, d / "qemu.log")
        self.progress(f"{v.name}: started (pid {v.pid}, {v.addr}, {len(v.drives)} drive(s))")

    def kill(self, vm: str) -> None:
        """Abrupt power-off (SIGKILL of its QEMU); drives keep what reached them."""
        with self._locked():
            st = self._load()
            v = self._vm(st, vm)
            qemu.kill(v.pid, self._tag(vm))
            v.pid = None
            self._save(st)
        self.progress(f"{vm}: killed")

    def start(self, vm: str, *, wait: bool = True) -> None:
        """Boot a stopped VM again with the same drives, identity and address."""
        with self._locked():
            st = self._load()
            v = self._vm(st, vm)
            if qemu.is_ours(v.pid, self._tag(vm)):
                raise BadInput(f"{vm} is already running", field="vm")
            v.unplugged = []  # a VM boots with every drive in its bay
            self._start_vm(st, v)
            self._save(st)
        if wait:
            self._wait_ready(st, [vm])

    def unplug(self, vm: str, serial: str, timeout: float = 180.0) -> None:
        """Pull NVMe drive `serial` out of the running VM (PCIe hot-unplug: the guest sees the
        controller go away, as when a drive is pulled from its bay or dies on the bus)."""
        with self._locked():
            st = self._load()
            v, i = self._running_drive(st, vm, serial)
            if serial in v.unplugged:
                raise BadInput(f"drive {serial} of {vm} is already unplugged", field="serial")
            qmp.unplug_drive(self.vm_dir(vm) / "qmp.sock", i, timeout)
            v.unplugged = [*v.unplugged, serial]
            self._save(st)
        self.progress(f"{vm}: drive {serial} unplugged")

    def plug(self, vm: str, serial: str) -> None:
        """Put an unplugged drive back into the running VM (same serial, same contents)."""
        with self._locked():
            st = self._load()
            v, i = self._running_drive(st, vm, serial)
            if serial not in v.unplugged:
                raise BadInput(f"drive {serial} of {vm} is plugged in", field="serial")
            qmp.plug_drive(self.vm_dir(vm) / "qmp.sock", i, v.drives[i]["path"], serial)
            v.unplugged = [s for s in v.unplugged if s != serial]
            self._save(st)
        self.progress(f"{vm}: drive {serial} plugged in")

    def smart_warning(self, vm: str, serial: str, bits: int) -> None:
        """Make drive `serial` report SMART critical warning `bits` (0-255; 0 clears): a drive
        that says it is failing (bit 2: reliability degraded) while it still reads and writes."""
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 255:
            raise BadInput(
                f"critical warning {bits!r} is out of range", field="critical_warning", allowed="0-255"
            )
        st = self._load()
        _, i = self._running_drive(st, vm, serial)
        if serial in self._vm(st, vm).unplugged:
            raise BadInput(f"drive {serial} of {vm} is unplugged", field="serial")
        qmp.set_critical_warning(self.vm_dir(vm) / "qmp.sock", i, bits)
        self.progress(f"{vm}: drive {serial} reports SMART critical warning 0x{bits:02x}")

    def _running_drive(self, st: dict[str, Any], vm: str, serial: str) -> tuple[VmSpec, int]:
        v = self._vm(st, vm)
        serials = [d["serial"] for d in v.drives]
        if serial not in serials:
            raise NotFound(f"{vm} has no drive {serial!r}", field="serial", allowed=serials)
        if not qemu.is_ours(v.pid, self._tag(vm)):
            raise OperationFailed(f"{vm} is not running (start it first)")
        return v, serials.index(serial)

    def set_credential(self, vm: str, name: str, data: bytes) -> None:
        """Give storage VM `vm` the systemd credential `name` (`nodeos.provision`: its configuration;
        `nodeos.join-token`: a join token), from its next start on, as a BMC would."""
        with self._locked():
            v = self._vm(self._load(), vm)
            if v.role != "storage":
                raise BadInput(f"{vm} is not a storage VM", field="vm", allowed=", ".join(self.storage_vms))
            diskboot.write_credential(self.vm_dir(vm), name, data)
        self.progress(f"{vm}: credential {name} set ({len(data)} bytes): given at its next start")

    def cut(self, vm: str) -> None:
        """Cut the VM off the lab network (its switch port goes down)."""
        self._set_link(vm, cut=True)

    def heal(self, vm: str) -> None:
        self._set_link(vm, cut=False)

    def _set_link(self, vm: str, cut: bool) -> None:
        with self._locked():
            st = self._load()
            v = self._vm(st, vm)
            netns.set_tap(self.ns, netns.tap_name(vm), not cut)
            v.cut = cut
            self._save(st)
        self.progress(f"{vm}: {'cut off the network' if cut else 'back on the network'}")

    def down(self) -> None:
        """Everything gone: QEMU processes, the namespace with its bridge and taps, the state."""
        with self._locked():
            self._down_locked()

    def _down_locked(self) -> None:
        try:
            st = self._load()
        except NotFound:
            st = None
        # Every VM killed first, then waited for (side by side, not one after another); one that
        # will not die does not stop the rest of the tear-down, and is reported at its end.
        killed = [(v.pid, self._tag(n)) for n, v in (st or {"vms": {}})["vms"].items()]
        killed = [(pid, tag) for pid, tag in killed if qemu.send_kill(pid, tag)]
        stuck: list[EnvironmentProblem] = []
        for pid, tag in killed:
            try:
                qemu.wait_gone(pid, tag)
            except EnvironmentProblem as e:
                stuck.append(e)
        # Also any QEMU of this lab the state does not know about (crash between start and save).
        for pid in _pids_with_tag(f"nodeos-lab-{self.name}-"):
            os.kill(pid, 9)
        netns.delete(self.ns)
        shutil.rmtree(self.dir, ignore_errors=True)
        if stuck:
            raise stuck[0]

    def collect(self, dest: Path) -> list[Path]:
        """Copy serial consoles and QEMU logs to dest (test artifacts)."""
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        vms = self.dir / "vms"
        if vms.is_dir():
            for d in sorted(vms.iterdir()):
                for f in ("console.log", "qemu.log"):
                    if (d / f).exists():
                        p = dest / f"{d.name}-{f}"
                        shutil.copyfile(d / f, p)
                        out.append(p)
        return out


def _pids_with_tag(prefix: str) -> list[int]:
    found = []
    needle = re.compile(b"\0-name\0" + re.escape(prefix.encode()) + rb"[sh][0-9]+\0")
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if needle.search(cmd) and b"qemu" in cmd.split(b"\0", 1)[0]:
            found.append(int(p.name))
    return found
