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

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nodeos.errors import AlreadyExists, BadInput, EnvironmentProblem, NotFound, OperationFailed
from nodeos.lab import image as image_mod
from nodeos.lab import netns, qemu, qmp
from nodeos.lab.plan import (
    SUBNETS,
    check_counts,
    check_name,
    cluster_labels,
    cluster_summary,
    plan_vms,
    storage_names,
    subnet_of,
)
from nodeos.lab.qemu import VmSpec
from nodeos.lab.qga import AgentUnavailable, ExecResult, GuestAgent

# Generous: on a 2-core host shared by many TCG VMs a boot has taken 10-15 min (a bound, not a wait).
BOOT_TIMEOUT = float(os.environ.get("NODEOS_LAB_BOOT_TIMEOUT", "1800"))

Progress = Callable[[str], None]


def _default_progress(msg: str) -> None:
    print(f"lab: {msg}", file=sys.stderr, flush=True)


def labs_root() -> Path:
    env = os.environ.get("NODEOS_LAB_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/nodeos-lab")
    return Path.home() / ".local" / "state" / "nodeos-lab"


class Lab:
    """One named lab. Cheap to construct; every method reads the state from disk."""

    def __init__(self, name: str = "default", *, root: Path | None = None, progress: Progress | None = None):
        self.name = check_name(name)
        self.root = Path(root) if root else labs_root()
        self.dir = self.root / self.name
        self.state_file = self.dir / "state.json"
        self.ns = netns.netns_name(self.name)
        self.progress = progress or _default_progress

    # ---- state -------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{self.name}.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _load(self) -> dict[str, Any]:
        try:
            st = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            raise NotFound(f"lab {self.name!r} is not up", field="name", allowed=self.all_names()) from None
        st["vms"] = {n: VmSpec(**v) for n, v in st["vms"].items()}
        return st

    def _save(self, st: dict[str, Any]) -> None:
        out = dict(st)
        out["vms"] = {n: asdict(v) for n, v in st["vms"].items()}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        os.replace(tmp, self.state_file)

    def all_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "state.json").exists())

    def is_up(self) -> bool:
        return self.state_file.exists()

    def _vm(self, st: dict[str, Any], vm: str) -> VmSpec:
        if vm not in st["vms"]:
            raise NotFound(f"no VM {vm!r} in lab {self.name!r}", field="vm", allowed=sorted(st["vms"]))
        return st["vms"][vm]

    @property
    def failed_dir(self) -> Path:
        """Where the consoles of a failed `up` are kept (the lab itself is removed)."""
        return self.root / "failed" / self.name

    def vm_dir(self, vm: str) -> Path:
        return self.dir / "vms" / vm

    def _tag(self, vm: str) -> str:
        return f"nodeos-lab-{self.name}-{vm}"

    def _agent(self, vm: str) -> GuestAgent:
        return GuestAgent(self.vm_dir(vm) / "qga.sock")

    # ---- public queries ----------------------------------------------------------------
    @property
    def vms(self) -> list[str]:
        return list(self._load()["vms"])

    @property
    def storage_vms(self) -> list[str]:
        return [n for n, v in self._load()["vms"].items() if v.role == "storage"]

    @property
    def host_vms(self) -> list[str]:
        return [n for n, v in self._load()["vms"].items() if v.role == "host"]

    def addr(self, vm: str) -> str:
        """The VM's IPv4 address on the lab network."""
        return self._vm(self._load(), vm).addr

    def spec(self, vm: str) -> VmSpec:
        return self._vm(self._load(), vm)

    def serials(self, vm: str) -> list[str]:
        return [d["serial"] for d in self._vm(self._load(), vm).drives]

    def console_path(self, vm: str) -> Path:
        self._vm(self._load(), vm)
        return self.vm_dir(vm) / "console.log"

    def status(self) -> dict[str, Any]:
        st = self._load()
        rows = []
        for n, v in st["vms"].items():
            running = qemu.is_ours(v.pid, self._tag(n))
            state = "running" if running else "stopped"
            if running and v.cut:
                state = "cut"
            rows.append(
                {
                    "name": n,
                    "role": v.role,
                    "address": v.addr,
                    "state": state,
                    "pid": v.pid if running else None,
                    "hostnqn": v.hostnqn,
                    "drives": [d["serial"] for d in v.drives],
                    "unplugged": list(v.unplugged),
                }
            )
        out = {
            "lab": self.name,
            "netns": self.ns,
            "subnet": f"{subnet_of(st['subnet'])}.0/24",
            "accel": st["accel"],
            "image": st["image"],
            "vms": rows,
        }
        if st.get("cluster"):
            out["cluster"] = self._cluster_view(st, rows)
        return out

    def _cluster_view(self, st: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The cluster as the first running storage VM sees it (leader, members), and the labels."""
        from nodeos.lab import cluster as cluster_mod

        view: dict[str, Any] = {"labels": st["cluster"].get("labels", {})}
        running = [r["name"] for r in rows if r["role"] == "storage" and r["state"] == "running"]
        if not running:
            return {**view, "error": "no storage VM is running"}
        try:
            return {
                **view,
                "seen_from": running[0],
                **cluster_summary(cluster_mod.cluster_status(self, running[0])),
            }
        except (OperationFailed, AgentUnavailable) as e:
            return {**view, "seen_from": running[0], "error": str(e)}

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
    ) -> dict[str, Any]:
        """Boot the lab and return when every VM is ready; on any failure nothing is left.

        cluster: form the storage VMs into one cluster (s1 inits, the others join) and label
        them: `labels` as VM:KEY=VALUE strings, None for the default rack=a, b, c..., [] for none."""
        check_counts(storage, drives, hosts, drive_size_mib)
        if cluster and not wait:
            raise BadInput("forming a cluster needs the VMs up: wait=True", field="wait")
        names = storage_names(storage)
        member_labels = cluster_labels(cluster, labels, names)
        if member_labels:
            from nodeos.lab.cluster import need_label_command

            need_label_command()  # before anything boots
        if os.geteuid() != 0:
            raise EnvironmentProblem("the lab needs root (network namespaces, taps)")
        with self._locked():
            if self.is_up():
                raise AlreadyExists(f"lab {self.name!r} is already up (use another --name, or down first)",
                                    field="name")  # fmt: skip
            qemu_path = qemu.find_qemu(qemu_bin)
            if kernel is not None and not Path(kernel).is_file():
                raise EnvironmentProblem(f"kernel {kernel} does not exist")
            img = image_mod.build_image(self.progress)
            kernel_path = Path(kernel) if kernel else img.kernel
            for p in (kernel_path, img.initrd, img.rootfs):
                if not p.is_file():
                    raise EnvironmentProblem(f"image file missing: {p} (rebuild with `nodeos-lab image`)")
            try:
                self._up_locked(storage, drives, hosts, drive_size_mib, qemu_path, kernel_path, img, wait)
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
        from nodeos.lab import cluster as cluster_mod

        cluster_mod.form(self, names, labels, self.progress)
        st = self._load()
        st["cluster"] = {"members": names, "labels": labels}
        self._save(st)

    def _pick_subnet(self) -> int:
        used = set()
        for other in self.all_names():
            with suppress(OSError, ValueError, KeyError):
                used.add(json.loads((self.root / other / "state.json").read_text())["subnet"])
        start = int(hashlib.sha256(self.name.encode()).hexdigest(), 16) % SUBNETS
        if self.name == "default":
            start = 0
        for i in range(SUBNETS):
            cand = (start + i) % SUBNETS
            if cand not in used:
                return cand
        raise OperationFailed("all 512 lab subnets of 198.18.0.0/15 are in use")

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
            if v.role == "storage":
                # The root file system is a fresh snapshot at every boot, but an appliance keeps
                # nodeosd's state (LMDB) across power cycles: it gets a disk of its own.
                qemu.make_state_disk(self.vm_dir(v.name) / qemu.STATE_DISK)
        for v in vms:
            self._start_vm(st, v)
            self._save(st)
        if wait:
            self._wait_ready(st, [v.name for v in vms])

    @contextmanager
    def _global_lock(self) -> Iterator[None]:
        with open(self.root / ".subnets.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _start_vm(self, st: dict[str, Any], v: VmSpec) -> None:
        d = self.vm_dir(v.name)
        d.mkdir(parents=True, exist_ok=True)
        for sock in ("qga.sock", "qmp.sock"):
            (d / sock).unlink(missing_ok=True)
        tap = netns.tap_name(v.name)
        netns.add_tap(self.ns, tap)
        netns.set_tap(self.ns, tap, not v.cut)
        argv = qemu.command_line(
            st["qemu"], v, accel=st["accel"], kernel=Path(st["kernel"]), initrd=Path(st["initrd"]),
            rootfs=Path(st["rootfs"]), vm_dir=d, tap=tap, tag=self._tag(v.name),
        )  # fmt: skip
        with open(d / "console.log", "ab") as f:
            f.write(f"\n===== nodeos-lab: starting {v.name} at {time.strftime('%F %T')} =====\n".encode())
        v.pid = qemu.start(argv, self.ns, d / "qemu.log")
        self.progress(f"{v.name}: started (pid {v.pid}, {v.addr}, {len(v.drives)} drive(s))")

    def _wait_ready(self, st: dict[str, Any], names: list[str], timeout: float = BOOT_TIMEOUT) -> None:
        """Every VM answers through its agent, finished booting, and (storage) runs nodeosd."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        pending = list(names)
        next_note = t0 + 30
        while pending:
            if time.monotonic() > next_note:
                next_note += 30
                for n in pending:
                    line = self._last_console_line(n)
                    self.progress(f"{n}: booting ({time.monotonic() - t0:.0f} s): {line}")
            for n in list(pending):
                v = st["vms"][n]
                if not qemu.is_ours(v.pid, self._tag(n)):
                    raise OperationFailed(
                        f"{n}: QEMU exited while booting; see {self.vm_dir(n) / 'console.log'}"
                    )
                if self._ready(st, v, deadline):
                    pending.remove(n)
                    self.progress(f"{n}: ready after {time.monotonic() - t0:.0f} s")
            if pending:
                if time.monotonic() > deadline:
                    raise OperationFailed(f"{', '.join(pending)} not ready after {timeout:.0f} s; "
                                          f"see the consoles under {self.dir / 'vms'}")  # fmt: skip
                time.sleep(1.0)

    def _last_console_line(self, vm: str) -> str:
        """The latest line of the VM's console, escape sequences dropped (progress display)."""
        try:
            with open(self.vm_dir(vm) / "console.log", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                tail = f.read().decode(errors="replace")
        except OSError:
            return ""
        lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[^\[]", "", ln).strip() for ln in tail.splitlines()]
        lines = [ln for ln in lines if ln]
        return lines[-1][:100] if lines else ""

    def _ready(self, st: dict[str, Any], v: VmSpec, deadline: float) -> bool:
        agent = self._agent(v.name)
        if not agent.ping(timeout=2.0):
            return False
        try:
            r = agent.exec(
                ["systemctl", "is-system-running", "--wait"], timeout=max(10.0, deadline - time.monotonic())
            )
        except AgentUnavailable:
            return False
        if r.stdout.strip() not in ("running", "degraded"):
            return False
        init = agent.exec(["systemctl", "is-active", "nodeos-lab-init.service"], timeout=30)
        if init.stdout.strip() != "active":
            log = agent.exec(
                ["journalctl", "-b", "-u", "nodeos-lab-init", "--no-pager", "-n", "30"], timeout=30
            )
            raise OperationFailed(f"{v.name}: lab setup failed in the VM:\n{log.stdout}")
        if v.role == "storage" and st.get("has_daemon"):
            # Starting (Type=notify) can take long under an emulated CPU, and Restart=always may
            # be between attempts: wait while it is on its way, give up when it keeps failing.
            failures = 0
            while True:
                a = agent.exec(["systemctl", "is-active", "nodeosd.service"], timeout=30)
                state = a.stdout.strip()
                if state == "active":
                    break
                restarts = agent.exec(["systemctl", "show", "-P", "NRestarts", "nodeosd.service"], timeout=30)
                failures = int(restarts.stdout.strip() or 0) + (state == "failed")
                # "failed": systemd gave up (e.g. exit 2, a bad configuration, is never restarted).
                if time.monotonic() > deadline or failures >= 3 or state in ("inactive", "failed"):
                    log = agent.exec(
                        ["journalctl", "-b", "-u", "nodeosd", "--no-pager", "-n", "40"], timeout=30
                    )
                    raise OperationFailed(
                        f"{v.name}: nodeosd is not active ({state}, {failures} failed start(s)):\n"
                        + log.stdout
                    )
                time.sleep(2)
        return True

    def wait_ready(self, vm: str, timeout: float = BOOT_TIMEOUT) -> None:
        st = self._load()
        self._vm(st, vm)
        self._wait_ready(st, [vm], timeout)

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

    def logs(self, vm: str) -> str:
        """The VM's serial console so far (kernel and systemd messages)."""
        p = self.console_path(vm)
        return p.read_text(errors="replace") if p.exists() else ""

    def exec(
        self,
        vm: str,
        argv: list[str],
        timeout: float = 120.0,
        input: bytes | str | None = None,
        *,
        check: bool = False,
    ) -> ExecResult:
        """Run argv inside the VM through its guest agent; check=True raises on rc != 0."""
        if not argv:
            raise BadInput("no command given", field="argv")
        st = self._load()
        v = self._vm(st, vm)
        if not qemu.is_ours(v.pid, self._tag(vm)):
            raise OperationFailed(f"{vm} is not running (start it first){qemu.exit_note(v.pid)}")
        r = self._agent(vm).exec(list(argv), timeout=timeout, input=input)
        if check and r.rc != 0:
            raise OperationFailed(
                f"{vm}: {argv!r} exited {r.rc}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}"
            )
        return r

    def exec_stream(
        self,
        vm: str,
        argv: list[str],
        on_stdout: Callable[[bytes], None],
        on_stderr: Callable[[bytes], None],
        timeout: float = 600.0,
        input: bytes | None = None,
    ) -> int:
        """Like exec, but output is handed to the callbacks while the command runs."""
        if not argv:
            raise BadInput("no command given", field="argv")
        st = self._load()
        v = self._vm(st, vm)
        if not qemu.is_ours(v.pid, self._tag(vm)):
            raise OperationFailed(f"{vm} is not running (start it first)")
        return self._agent(vm).exec_stream(list(argv), on_stdout, on_stderr, timeout=timeout, input=input)

    def sh(self, vm: str, script: str, timeout: float = 120.0, *, check: bool = True) -> ExecResult:
        """A shell snippet inside the VM (`sh -ec`); raises unless it succeeds by default."""
        return self.exec(vm, ["sh", "-ec", script], timeout=timeout, check=check)

    def down(self) -> None:
        """Everything gone: QEMU processes, the namespace with its bridge and taps, the state."""
        with self._locked():
            self._down_locked()

    def _down_locked(self) -> None:
        try:
            st = self._load()
        except NotFound:
            st = None
        if st is not None:
            for n, v in st["vms"].items():
                qemu.kill(v.pid, self._tag(n))
        # Also any QEMU of this lab the state does not know about (crash between start and save).
        for pid in _pids_with_tag(f"nodeos-lab-{self.name}-"):
            os.kill(pid, 9)
        netns.delete(self.ns)
        shutil.rmtree(self.dir, ignore_errors=True)

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
