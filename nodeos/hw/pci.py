"""PCI NVMe functions and who owns them: the kernel (driver `nvme`) or SPDK (`vfio-pci`, or
`uio_pci_generic` where there is no IOMMU), and handing one to SPDK and back.

Functional core: `claim_plan()` / `release_plan()` decide from sysfs facts and the mount
table whether a drive may change hands (never the boot drive, never a drive holding a mounted
file system, swap, or a device-mapper/md device stacked on it) and to which driver. vfio-pci
takes a drive's whole IOMMU group: `group_check()` refuses a drive whose group holds a device the
node still uses (a NIC, the boot drive), naming it; free NVMe drives of the group go along.
Imperative shell: `Sysfs` reads /sys and /proc under a root (a tree in a temporary directory in
tests) and binds a function to a driver by PCI address: driver_override, unbind, drivers_probe.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from nodeos.errors import BadInput, EnvironmentProblem, NotFound, OperationFailed
from nodeos.sysfs import read_attr

NVME_CLASS = "0x010802"  # mass storage, non-volatile memory, NVMe
KERNEL_DRIVER = "nvme"
SPDK_DRIVERS = ("vfio-pci", "uio_pci_generic")
BOOT_MOUNTS = ("/", "/boot", "/boot/efi", "/usr", "/var")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class Function:
    """One PCI NVMe function as sysfs shows it."""

    address: str  # 0000:01:00.0
    driver: str  # nvme, vfio-pci, uio_pci_generic, "" (unbound)
    iommu_group: str | None = None
    controllers: tuple[str, ...] = ()  # kernel controllers: nvme0
    blocks: tuple[str, ...] = ()  # namespaces and partitions on it: nvme0n1, nvme0n1p1
    holders: tuple[str, ...] = ()  # block devices stacked on those (dm-0, md127), transitively
    model: str = ""
    serial: str = ""
    firmware: str = ""

    @property
    def owner(self) -> str:
        if self.driver == KERNEL_DRIVER:
            return "kernel"
        if self.driver in SPDK_DRIVERS:
            return "spdk"
        return self.driver or "none"


@dataclass(frozen=True)
class Peer:
    """A PCI function of an IOMMU group as sysfs shows it (/sys/kernel/iommu_groups/N/devices)."""

    address: str
    pci_class: str  # 0x020000
    driver: str  # "" when no driver holds it
    names: tuple[str, ...] = ()  # its network interfaces (eth0)


@dataclass(frozen=True)
class Plan:
    """What a claim or release does: bind `address` (and `also`, the free NVMe drives of its
    IOMMU group) to `driver` (None: nothing to do)."""

    address: str
    driver: str | None
    why: str = ""
    notes: tuple[str, ...] = field(default=())
    also: tuple[str, ...] = ()


# Drivers vfio accepts beside its own in a group it opens (the kernel's vfio_driver_allowed).
_VFIO_OK_DRIVERS = ("", "vfio-pci", "pci-stub")
# Bridges: vfio accepts them whatever driver holds them (pcieport); class 0x0604 PCI-PCI,
# 0x0607 CardBus, 0x0609 semi-transparent (header type 1/2, not a device of its own).
_BRIDGE_CLASSES = ("0x0604", "0x0607", "0x0609")
_KINDS = {
    "0x0108": "NVMe drive",
    "0x0106": "SATA controller",
    "0x0104": "RAID controller",
    "0x0107": "SAS controller",
    "0x02": "network controller",
    "0x03": "display controller",
    "0x0c03": "USB controller",
    "0x0600": "host bridge",
}


def _kind(pci_class: str) -> str:
    for prefix in sorted(_KINDS, key=len, reverse=True):
        if pci_class.startswith(prefix):
            return _KINDS[prefix]
    return f"PCI device class {pci_class or 'unknown'}"


def check_address(value: object, fld: str = "address") -> str:
    """A PCI address, domain included (0000:01:00.0); the short form 01:00.0 gets domain 0000."""
    allowed = "a PCI address such as 0000:01:00.0 (see `nodeos drive list`)"
    if not isinstance(value, str):
        raise BadInput(f"{fld} must be a PCI address", field=fld, allowed=allowed)
    v = value.strip().lower()
    if v.startswith("pcie:"):
        v = v[len("pcie:") :]
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", v):
        v = "0000:" + v
    if not _BDF.match(v):
        raise BadInput(f"{fld} {value!r} is not a PCI address", field=fld, allowed=allowed)
    return v


def _find(address: str, functions: list[Function]) -> Function:
    for f in functions:
        if f.address == address:
            return f
    raise NotFound(
        f"no NVMe PCI function at {address}",
        field="address",
        allowed=sorted(f.address for f in functions) or None,
    )


def _uses(f: Function, mounts: dict[str, tuple[str, ...]], swaps: set[str]) -> tuple[str, str] | None:
    """(kind, text) of the first use that forbids taking the drive from the kernel."""
    names = f.blocks + f.holders
    for n in names:
        boot = [m for m in mounts.get(n, ()) if m in BOOT_MOUNTS]
        if boot:
            return "boot", f"it is the boot drive (/dev/{n} is mounted on {boot[0]})"
    for n in names:
        if mounts.get(n):
            return "mounted", f"it holds a mounted file system (/dev/{n} on {mounts[n][0]}); unmount it first"
    for n in names:
        if n in swaps:
            return "swap", f"it is in use as swap (/dev/{n}); swapoff it first"
    if f.holders:
        return "held", (
            f"it is in use by {', '.join(f.holders)} (device mapper, LVM or md stacked on it); "
            "take that down first"
        )
    return None


def claim_plan(
    address: str,
    functions: list[Function],
    mounts: dict[str, tuple[str, ...]],
    swaps: set[str],
    iommu: bool,
    group: tuple[Peer, ...] = (),
) -> Plan:
    """Hand the drive at `address` to SPDK: vfio-pci with an IOMMU (its function in an IOMMU
    group, `group` its members), uio_pci_generic without. Refused (BadInput, field address) for
    the boot drive, a drive in use, one bound to a driver that is neither nvme nor SPDK's, or one
    whose IOMMU group holds a device the node still uses (see `group_check`)."""
    f = _find(check_address(address), functions)
    if f.owner == "spdk":
        return Plan(f.address, None, why=f"already owned by SPDK ({f.driver})")
    if f.driver and f.driver != KERNEL_DRIVER:
        raise BadInput(
            f"drive {f.address} is bound to driver {f.driver}, not nvme: nodeos takes only drives "
            "the kernel's nvme driver or SPDK holds",
            field="address",
        )
    use = _uses(f, mounts, swaps)
    if use is not None:
        raise BadInput(f"drive {f.address} cannot be handed to SPDK: {use[1]}", field="address")
    if iommu and f.iommu_group is not None:
        also = group_check(f, group, functions, mounts, swaps)
        notes = tuple(
            f"{a} shares IOMMU group {f.iommu_group} with {f.address} and is free: handed to SPDK too "
            "(vfio-pci takes the whole group)"
            for a in also
        )
        return Plan(f.address, "vfio-pci", why="IOMMU group " + f.iommu_group, notes=notes, also=also)
    why = "no IOMMU" if not iommu else "no IOMMU group for this function"
    notes = (
        f"{why}: uio_pci_generic, as SPDK's setup script does without an IOMMU (no DMA isolation; "
        "vfio-pci needs the IOMMU on: intel_iommu=on or amd_iommu=on)",
    )
    return Plan(f.address, "uio_pci_generic", why=why, notes=notes)


def group_check(
    f: Function,
    group: tuple[Peer, ...],
    functions: list[Function],
    mounts: dict[str, tuple[str, ...]],
    swaps: set[str],
) -> tuple[str, ...]:
    """vfio-pci opens an IOMMU group only when no other driver holds a device of it (bridges,
    pci-stub and unbound functions aside). The other NVMe drives of `f`'s group that the kernel
    holds and nothing uses go to SPDK with it (returned); any other held device, or an NVMe drive
    in use, refuses the claim (BadInput, field address) naming every such device."""
    nvme = {x.address: x for x in functions}
    also: list[str] = []
    blockers: list[str] = []
    for p in sorted(group, key=lambda p: p.address):
        if p.address == f.address or p.driver in _VFIO_OK_DRIVERS:
            continue
        if p.pci_class.startswith(_BRIDGE_CLASSES):
            continue
        other = nvme.get(p.address)
        if other is not None and other.owner == "kernel":
            use = _uses(other, mounts, swaps)
            if use is None:
                also.append(p.address)
                continue
            blockers.append(f"{p.address} (NVMe drive {'/'.join(other.controllers) or '?'}: {use[1]})")
            continue
        names = f", {', '.join(p.names)}" if p.names else ""
        blockers.append(f"{p.address} ({_kind(p.pci_class)}, driver {p.driver}{names})")
    if blockers:
        raise BadInput(
            f"drive {f.address} cannot be handed to SPDK: vfio-pci takes its whole IOMMU group "
            f"{f.iommu_group}, which also holds {'; '.join(blockers)}, still in use by this node. "
            "Put the drive in a slot with an IOMMU group of its own (`nodeos drive list` shows the groups)",
            field="address",
        )
    return tuple(also)


def release_plan(address: str, functions: list[Function], pools: dict[str, str]) -> Plan:
    """Give the drive at `address` back to the kernel's nvme driver. Refused while a pool is
    made of it (`pools`: PCI address -> pool name)."""
    f = _find(check_address(address), functions)
    if f.address in pools:
        raise BadInput(
            f"drive {f.address} belongs to pool {pools[f.address]!r}; delete the pool first",
            field="address",
        )
    if f.owner == "kernel":
        return Plan(f.address, None, why="already owned by the kernel (nvme)")
    return Plan(f.address, KERNEL_DRIVER, why=f"from {f.driver or 'no driver'}")


# --- the edge: sysfs and /proc -----------------------------------------------------------------


def _link_name(p: Path) -> str:
    try:
        return os.path.basename(os.readlink(p))
    except OSError:
        return ""


class Sysfs:
    """/sys and /proc under `root` ("/" on a machine; a prepared tree in tests)."""

    def __init__(self, root: str | Path = "/", modprobe: bool = True) -> None:
        self.root = Path(root)
        self.modprobe = modprobe
        self.pci = self.root / "sys/bus/pci/devices"

    def functions(self) -> list[Function]:
        out: list[Function] = []
        if not self.pci.is_dir():
            return out
        for dev in sorted(self.pci.iterdir()):
            if read_attr(dev / "class") != NVME_CLASS:
                continue
            ctrls = tuple(sorted(c.name for c in (dev / "nvme").glob("nvme*")))
            blocks = self._blocks(dev, ctrls)
            first = dev / "nvme" / ctrls[0] if ctrls else None
            out.append(
                Function(
                    address=dev.name,
                    driver=_link_name(dev / "driver"),
                    iommu_group=_link_name(dev / "iommu_group") or None,
                    controllers=ctrls,
                    blocks=blocks,
                    holders=self._holders(blocks),
                    model=read_attr(first / "model") if first else "",
                    serial=read_attr(first / "serial") if first else "",
                    firmware=read_attr(first / "firmware_rev") if first else "",
                )
            )
        return out

    def _blocks(self, dev: Path, ctrls: tuple[str, ...]) -> tuple[str, ...]:
        """Namespaces (nvme0n1, or the multipath head over nvme0c0n1) and their partitions."""
        names: set[str] = set()
        block = self.root / "sys/class/block"
        for c in ctrls:
            for ns in (dev / "nvme" / c).glob("nvme*n*"):
                names.add(ns.name)
                names.update(p.name for p in ns.glob(ns.name + "p*"))
        paths = {n for n in names if re.match(r"^nvme\d+c\d+n\d+$", n)}
        if paths and block.is_dir():  # native multipath: the head lists its paths
            for head in block.glob("nvme*n*"):
                if {p.name for p in (head / "multipath").glob("*")} & paths:
                    names.add(head.name)
                    names.update(p.name for p in head.glob(head.name + "p*"))
        return tuple(sorted(names - paths))

    def _holders(self, blocks: tuple[str, ...]) -> tuple[str, ...]:
        seen: set[str] = set()
        todo = list(blocks)
        while todo:
            n = todo.pop()
            for h in (self.root / "sys/class/block" / n / "holders").glob("*"):
                if h.name not in seen:
                    seen.add(h.name)
                    todo.append(h.name)
        return tuple(sorted(seen))

    def mounts(self) -> dict[str, tuple[str, ...]]:
        """Kernel block device name -> its mount points (from mountinfo's major:minor)."""
        out: dict[str, list[str]] = {}
        for line in read_attr(self.root / "proc/self/mountinfo").splitlines():
            parts = line.split()
            if len(parts) < 5:
                continue
            name = _link_name(self.root / "sys/dev/block" / parts[2])
            if name:
                out.setdefault(name, []).append(parts[4].replace("\\040", " "))
        return {k: tuple(v) for k, v in out.items()}

    def swaps(self) -> set[str]:
        lines = read_attr(self.root / "proc/swaps").splitlines()[1:]
        return {os.path.basename(line.split()[0]) for line in lines if line.split()}

    def iommu(self) -> bool:
        groups = self.root / "sys/kernel/iommu_groups"
        return groups.is_dir() and any(groups.iterdir())

    def group(self, group: str | None) -> tuple[Peer, ...]:
        """The PCI functions of IOMMU group `group` (none for None)."""
        if group is None:
            return ()
        out: list[Peer] = []
        devices = self.root / "sys/kernel/iommu_groups" / group / "devices"
        for d in sorted(devices.glob("*")) if devices.is_dir() else []:
            dev = self.pci / d.name
            net = dev / "net"
            out.append(
                Peer(
                    address=d.name,
                    pci_class=read_attr(dev / "class"),
                    driver=_link_name(dev / "driver"),
                    names=tuple(sorted(n.name for n in net.iterdir())) if net.is_dir() else (),
                )
            )
        return tuple(out)

    def bind(self, address: str, driver: str) -> None:
        """Bind the function to `driver` by its address alone (driver_override: no other device
        with the same vendor/device id moves), then check that it took."""
        address = check_address(address)
        dev = self.pci / address
        if self.modprobe:
            p = subprocess.run(["modprobe", driver], capture_output=True, text=True, check=False)
            if p.returncode != 0:
                raise EnvironmentProblem(
                    f"cannot load kernel module {driver}: {p.stderr.strip()[-200:]}", field="address"
                )
        try:
            (dev / "driver_override").write_text(driver)
            if (dev / "driver").exists():
                (dev / "driver" / "unbind").write_text(address)
            (self.root / "sys/bus/pci/drivers_probe").write_text(address)
            if driver == KERNEL_DRIVER:
                (dev / "driver_override").write_text("\n")  # back to the default matching
        except OSError as e:
            raise OperationFailed(f"binding {address} to {driver} failed: {e}", field="address") from None
        now = _link_name(dev / "driver")
        if now != driver:
            raise OperationFailed(
                f"{address} is bound to {now or 'no driver'} after binding it to {driver}", field="address"
            )
