"""QEMU command lines (pure) and the processes behind them.

KVM is used when it actually boots a kernel here; otherwise TCG with one thread per vCPU.
The probe boots the lab kernel with no root file system and `panic=-1 -no-reboot`: under
working KVM it panics and QEMU exits within seconds; a broken KVM aborts or hangs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from nodeos.errors import EnvironmentProblem

QEMU_DEFAULT = "qemu-system-x86_64"
# Where nodeosd in a storage VM listens for cluster peers (on its lab address).
PEER_PORT = 7100
PROBE_CACHE = Path("/run/nodeos-lab-accel") if os.geteuid() == 0 else Path("/tmp/nodeos-lab-accel")


def find_qemu(qemu: str | None = None) -> str:
    name = qemu or os.environ.get("NODEOS_LAB_QEMU") or QEMU_DEFAULT
    path = shutil.which(name)
    if path is None:
        raise EnvironmentProblem(
            f"QEMU not found: {name!r} (install qemu-system-x86 or run images/bootstrap.sh)"
        )
    return path


# Under TCG a CPU model whose features QEMU has emulated for years, not `-cpu max`: on QEMU 7.2
# max adds AVX/AVX2/VAES/FMA (new to TCG in 7.2), 5-level paging, PKS, SVM and MPX, and three guest
# kernel deaths in this lab had the emulated CPU's state wrong (reserved EFLAGS bits in an rxe
# oops, a double fault that was no stack overflow, 2026-12-01 CI) or hung OVMF. Westmere still has
# SSE4.2, POPCNT, AES-NI and PCLMULQDQ (x86-64-v2: crc32c, TLS and the distribution's binaries).
TCG_CPU = os.environ.get("NODEOS_LAB_CPU", "Westmere")


def accel_argv(accel: str) -> list[str]:
    """-accel and -cpu for a lab VM: the host's CPU under KVM, TCG_CPU under TCG."""
    if accel == "kvm":
        return ["-accel", "kvm", "-cpu", "host"]
    return ["-accel", "tcg,thread=multi", "-cpu", TCG_CPU]


def choose_accel(qemu: str, kernel: Path) -> str:
    """'kvm' or 'tcg' (NODEOS_LAB_ACCEL forces one); the probe result is kept per host boot."""
    forced = os.environ.get("NODEOS_LAB_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    try:
        cached = PROBE_CACHE.read_text().split()
        if len(cached) == 2 and cached[0] == qemu:
            return cached[1]
    except OSError:
        pass
    accel = "kvm" if _kvm_boots(qemu, kernel) else "tcg"
    with contextlib.suppress(OSError):
        PROBE_CACHE.write_text(f"{qemu} {accel}\n")
    return accel


def _kvm_boots(qemu: str, kernel: Path, timeout: float = 20.0) -> bool:
    argv = [
        qemu, "-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults", "-display", "none",
        "-no-reboot", "-serial", "stdio", "-kernel", str(kernel),
        "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False
    return b"Kernel panic" in out or b"VFS:" in out


# Units a lab VM does not need (boot time under TCG is mostly userspace): no VGA console,
# no binfmt, no RDMA hardware ULPs (lab-init loads rdma_rxe itself), no NVMe autoconnect.
LAB_MASKED_UNITS: tuple[str, ...] = (
    "getty@tty1.service",
    "systemd-vconsole-setup.service",
    "rdma-load-modules@rdma.service",
    "rdma-load-modules@roce.service",
    "rdma-load-modules@infiniband.service",
    "rdma-ndd.service",
    "nvmf-autoconnect.service",
    "nvmefc-boot-connections.service",
    "blk-availability.service",
    "systemd-binfmt.service",
    "proc-sys-fs-binfmt_misc.automount",
    "sys-fs-fuse-connections.mount",
    "modprobe@drm.service",
    "systemd-logind.service",
    # Nobody logs in to a lab VM (root is locked; commands go through the guest agent): each
    # unit is a process start that costs seconds under TCG on a busy host.
    "systemd-user-sessions.service",
    "serial-getty@ttyS0.service",
    "dev-hugepages.mount",
    "dev-mqueue.mount",
    "systemd-pstore.service",
    "systemd-hibernate-clear.service",
    "uuidd.socket",
)
STORAGE_MASKED_UNITS: tuple[str, ...] = ("dbus.service", "dbus.socket")


@dataclass
class VmSpec:
    """Everything needed to (re)start one VM; kept in the lab's state file."""

    name: str
    role: str  # "storage" | "host"
    index: int
    ip: str  # with prefix, e.g. 198.18.7.11/24
    mac: str
    hostnqn: str
    hostid: str
    memory_mib: int
    drives: list[dict[str, str]] = field(default_factory=list)  # {serial, path}
    pid: int | None = None
    cut: bool = False
    unplugged: list[str] = field(default_factory=list)  # serials pulled out (`nodeos-lab unplug`)

    @property
    def addr(self) -> str:
        return self.ip.split("/")[0]


def kernel_cmdline(vm: VmSpec, accel: str) -> str:
    parts = [
        "root=/dev/vda", "rw", "console=ttyS0,115200", "net.ifnames=0", "fsck.mode=skip",
        f"systemd.hostname={vm.name}", "nodeos.lab=1", f"nodeos.role={vm.role}",
        f"nodeos.ip={vm.ip}", f"nodeos.hostid={vm.hostid}", f"nodeos.hostnqn={vm.hostnqn}",
        # q35's built-in SATA, SMBus, LPC watchdog: nothing on them in the lab, skip the probes.
        "modprobe.blacklist=ahci,i2c_i801,lpc_ich,iTCO_wdt,iTCO_vendor_support,pcspkr,kvm_amd,kvm_intel,powernow_k8",
    ]  # fmt: skip
    parts += [f"systemd.mask={u}" for u in LAB_MASKED_UNITS]
    if vm.role == "host":
        # GPU nodes run stock Linux, never nodeos. D-Bus stays: nvme-stas talks to avahi over it
        # (nodeos/hostsetup/, tests/lab/test_host_stas.py).
        parts += ["nvme_core.multipath=Y", "systemd.mask=nodeosd.service"]
    else:
        # Nothing in a storage VM talks D-Bus (systemctl as root uses systemd's private socket).
        parts += [f"systemd.mask={u}" for u in STORAGE_MASKED_UNITS]
        # Storage VMs keep LVM metadata daemons out of the boot path; nodeos drives LVM itself.
        parts.append("systemd.mask=lvm2-monitor.service")
        # nodeosd's state disk, mounted before local-fs.target (so before nodeosd starts).
        parts.append(f"systemd.mount-extra=LABEL={STATE_LABEL}:/var/lib/nodeos:ext4:defaults")
        # lab-init writes nodeosd's config from this: peers on the lab address, so any lab can be
        # formed into a cluster (`nodeos-lab up --cluster`), node name = VM name.
        parts.append(f"nodeos.peer={vm.addr}:{PEER_PORT}")
        # The same identity as first-boot provisioning's own words (docs/provisioning.md), which
        # lab-init then applies through `nodeos provision apply`: the path a bare-metal node takes.
        parts += [
            f"nodeos.hostname={vm.name}", f"nodeos.address=eth0:{vm.ip}", f"nodeos.storage={vm.addr}",
            f"nodeos.peer_port={PEER_PORT}",
        ]  # fmt: skip
    if accel == "tcg":
        # An emulated CPU on a busy host can be 10x slower than usual: looser soft-lockup
        # watchdog, and systemd/udev timeouts long enough that a slow boot is not a failed one.
        parts += [
            "watchdog_thresh=60",
            "systemd.default_timeout_start_sec=900",
            "systemd.default_device_timeout_sec=900",
            "udev.event_timeout=900",
            "rd.udev.event_timeout=900",
        ]
    return " ".join(parts)


STATE_DISK = "state.img"
STATE_LABEL = "nodeos-state"
STATE_DISK_MIB = 256


def make_state_disk(path: Path) -> None:
    """An empty ext4 image for /var/lib/nodeos of a storage VM (made without loop devices)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(STATE_DISK_MIB * 1024 * 1024)
    subprocess.run(
        ["mke2fs", "-q", "-F", "-t", "ext4", "-L", STATE_LABEL, "-m", "0", str(path)],
        check=True,
        capture_output=True,
    )


def command_line(
    qemu: str,
    vm: VmSpec,
    *,
    accel: str,
    kernel: Path,
    initrd: Path,
    rootfs: Path,
    vm_dir: Path,
    tap: str,
    tag: str,
    disk_boot: bool = False,
) -> list[str]:
    """The QEMU argv for a lab VM (pure: no side effects). disk_boot: a storage VM booting its own
    copy of the raw disk under OVMF (tests/tooling/nodeos_devtools/lab/diskboot.py) instead of the kernel and
    rootfs."""
    from nodeos_devtools.lab import diskboot

    accel_args = accel_argv(accel)
    argv = [
        qemu, "-name", tag,
        *accel_args, "-machine", "q35", "-smp", "1", "-m", str(vm.memory_mib),
        "-nodefaults", "-no-user-config", "-display", "none",
    ]  # fmt: skip
    if disk_boot:
        argv += diskboot.boot_args(vm, vm_dir, accel)
    else:
        argv += [
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", kernel_cmdline(vm, accel),
            # The root file system is shared by every VM: each boot sees it fresh (snapshot).
            "-drive", f"file={rootfs},if=virtio,format=raw,snapshot=on,cache=unsafe",
        ]  # fmt: skip
    argv += [
        *diskboot.credential_args(vm_dir),
        "-netdev", f"tap,id=net0,ifname={tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=net0,mac={vm.mac}",
        "-chardev", f"socket,id=qga,path={vm_dir / 'qga.sock'},server=on,wait=off",
        "-device", "virtio-serial-pci",
        "-device", "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
        "-chardev", f"file,id=con,path={vm_dir / 'console.log'},append=on",
        "-serial", "chardev:con",
        "-qmp", f"unix:{vm_dir / 'qmp.sock'},server=on,wait=off",
        "-device", "virtio-rng-pci",
    ]  # fmt: skip
    if vm.role == "storage" and not disk_boot:  # a disk-booted VM has its state partition
        argv += ["-drive", f"file={vm_dir / STATE_DISK},if=virtio,format=raw,cache={DISK_CACHE}"]
    for i, d in enumerate(vm.drives):
        # Each drive sits behind a PCIe root port of its own: a device on q35's root bus cannot
        # be hot-unplugged (`nodeos-lab unplug`), one behind a root port can.
        argv += [
            "-device", f"pcie-root-port,id={drive_port_id(i)},chassis={i + 1}",
            "-drive", drive_backend(i, d["path"]),
            "-device", drive_device(i, d["serial"]),
        ]  # fmt: skip
    return argv


# The VMs' state disks and NVMe drives: a guest's flush stops at QEMU, whose writes sit in the
# host's page cache. A VM powered off (QEMU killed or reset) keeps every write QEMU took, so the
# crash and power-off tests see what hardware would; only a crash of the host itself, which no
# test does, could lose them. With `writeback` every guest fsync became a host fsync on a disk
# shared by four VMs: Raft's fsync took 0.5 s on average and seconds in its tail (the lab's
# /metrics), its loop stalled that long, and followers elected new leaders over and over.
DISK_CACHE = "unsafe"


def drive_port_id(i: int) -> str:
    return f"rp{i}"


def drive_device_id(i: int) -> str:
    """QEMU's id of a storage VM's i-th NVMe controller (what device_del names)."""
    return f"nvme{i}"


def drive_backend(i: int, path: str) -> str:
    """The -drive (and HMP drive_add) options of the i-th NVMe drive's backing file."""
    return f"file={path},if=none,id=nvm{i},format=raw,cache={DISK_CACHE},aio=threads"


def drive_device(i: int, serial: str) -> str:
    """The -device (and device_add) options of the i-th NVMe controller."""
    return f"nvme,serial={serial},drive=nvm{i},bus={drive_port_id(i)},id={drive_device_id(i)}"


def start(argv: list[str], netns: str, log: Path) -> int:
    """Start QEMU inside the lab's namespace; returns its PID (`ip netns exec` execs QEMU)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,  # survives the nodeos-lab process that started it
        )
    # Catch an immediate failure (bad option, tap busy) rather than waiting for a boot.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EnvironmentProblem(f"QEMU exited at once ({proc.returncode}): {log.read_text()[-1500:]}")
        time.sleep(0.1)
    return proc.pid


def proc_state(stat_path: str) -> str:
    """The state letter of a /proc/PID[/task/TID]/stat ("R", "S", "Z", ...); OSError when gone."""
    return Path(stat_path).read_text().rsplit(")", 1)[-1].split()[0]


def is_ours(pid: int | None, tag: str) -> bool:
    """Whether pid is still the QEMU of this VM (guards against PID reuse)."""
    if not pid:
        return False
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = proc_state(f"/proc/{pid}/stat")
    except OSError:
        return False
    if state == "Z":
        return False
    return b"\0-name\0" + tag.encode() + b"\0" in cmd


def exit_note(pid: int | None) -> str:
    """How a QEMU that is gone ended, when it was our child and is not reaped yet (diagnosis)."""
    if not pid:
        return ""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return ""
    if got != pid:
        return ""
    if os.WIFSIGNALED(status):
        return f" (its QEMU was killed by signal {os.WTERMSIG(status)})"
    return f" (its QEMU exited with status {os.waitstatus_to_exitcode(status)})"


def _exiting(pid: int) -> bool:
    """Whether any thread of pid is still alive. A killed multi-threaded QEMU shows its main
    thread as a zombie while other threads still tear down and hold its files (the tap): only
    when every thread is gone is the tap free for the next boot."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            state = proc_state(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        if state not in ("Z", "X"):
            return True
    return False


def kill(pid: int | None, tag: str, timeout: float = 30.0) -> None:
    """Abrupt power-off: SIGKILL, then wait until every thread of it is gone (its tap is free)."""
    if send_kill(pid, tag):
        wait_gone(pid, tag, timeout)


def send_kill(pid: int | None, tag: str) -> bool:
    """SIGKILL to our QEMU `pid`; whether it was there to kill."""
    if not is_ours(pid, tag):
        return False
    assert pid is not None
    try:
        # The VM's whole process group: a disk-booted VM's QEMU runs under its cold-start
        # supervisor (tests/tooling/nodeos_devtools/lab/coldboot.py), which leads the group the lab started.
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` (other than its leader) has a live thread: a supervised
    QEMU (tests/tooling/nodeos_devtools/lab/coldboot.py) still tearing down and holding the VM's tap."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or p.name == str(pgid):
            continue
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[2] == str(pgid) and _exiting(int(p.name)):
            return True
    return False


def wait_gone(pid: int | None, tag: str, timeout: float = 30.0) -> None:
    """Until every thread of a killed QEMU is gone; EnvironmentProblem after `timeout`."""
    assert pid is not None
    deadline = time.monotonic() + timeout
    reaped = False
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            # Our own child when started by this process: reap it (possible once all threads exited).
            reaped = reaped or os.waitpid(pid, os.WNOHANG)[0] == pid
        if (reaped or not _exiting(pid)) and not _group_alive(pid):
            return
        time.sleep(0.05)
    raise EnvironmentProblem(f"QEMU {pid} ({tag}) still has live threads {timeout:.0f} s after SIGKILL")


OVMF_DIR = Path("/usr/share/OVMF")


def uefi_command_line(
    qemu: str, *, accel: str, disk: Path, vars_file: Path, work: Path, tag: str
) -> list[str]:
    """QEMU argv that boots a raw GPT disk through OVMF (UEFI) like a bare-metal server would."""
    accel_args = accel_argv(accel)
    return [
        qemu, "-name", tag, *accel_args, "-machine", "q35", "-smp", "1", "-m", "1024",
        "-nodefaults", "-no-user-config", "-display", "none", "-nic", "none",
        "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_DIR / 'OVMF_CODE_4M.fd'}",
        "-drive", f"if=pflash,format=raw,unit=1,file={vars_file}",
        "-drive", f"file={disk},if=virtio,format=raw,snapshot=on",
        "-chardev", f"socket,id=qga,path={work / 'qga.sock'},server=on,wait=off",
        "-device", "virtio-serial-pci",
        "-device", "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
        "-chardev", f"file,id=con,path={work / 'console.log'}",
        "-serial", "chardev:con",
        "-device", "virtio-rng-pci",
    ]  # fmt: skip
