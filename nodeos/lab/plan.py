"""The shape of a lab, decided without side effects: names, sizes, addresses, identities."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from nodeos.errors import BadInput
from nodeos.lab.qemu import VmSpec

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}$")
MAX_STORAGE = 8
MAX_HOSTS = 8
MAX_DRIVES = 8
DRIVE_SIZE_MIN_MIB = 64
DRIVE_SIZE_MAX_MIB = 64 * 1024
SUBNETS = 512  # 198.18.0.0/15 holds 512 /24s
STORAGE_MEMORY_MIB = 1024
HOST_MEMORY_MIB = 768


def subnet_of(index: int) -> str:
    """The /24 prefix (three octets) of subnet number index in 198.18.0.0/15."""
    return f"198.{18 + index // 256}.{index % 256}"


def check_name(name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise BadInput(
            f"lab name {name!r} is not valid",
            field="name",
            allowed="1-16 characters: lower-case letters, digits, '-' (not first)",
        )
    return name


def check_counts(storage: int, drives: int, hosts: int, drive_size_mib: int) -> None:
    for field, value, lo, hi in (
        ("storage", storage, 1, MAX_STORAGE),
        ("drives", drives, 1, MAX_DRIVES),
        ("hosts", hosts, 0, MAX_HOSTS),
        ("drive_size_mib", drive_size_mib, DRIVE_SIZE_MIN_MIB, DRIVE_SIZE_MAX_MIB),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise BadInput(
                f"{field} must be between {lo} and {hi}, got {value!r}", field=field, allowed=f"{lo}..{hi}"
            )


def plan_vms(lab: str, subnet: int, storage: int, drives: int, hosts: int, drive_dir: Path) -> list[VmSpec]:
    """The VMs of a lab (pure): names, addresses, MACs, identities, drive serials."""
    prefix = subnet_of(subnet)
    vms: list[VmSpec] = []
    for role, count, first in (("storage", storage, 11), ("host", hosts, 101)):
        for i in range(1, count + 1):
            name = f"{'s' if role == 'storage' else 'h'}{i}"
            host_octet = first + i - 1
            hostid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.{lab}.lab.nodeos"))
            vm = VmSpec(
                name=name,
                role=role,
                index=host_octet,
                ip=f"{prefix}.{host_octet}/24",
                mac=f"52:54:00:{subnet // 256:02x}:{subnet % 256:02x}:{host_octet:02x}",
                hostnqn=f"nqn.2014-08.org.nvmexpress:uuid:{hostid}",
                hostid=hostid,
                memory_mib=STORAGE_MEMORY_MIB if role == "storage" else HOST_MEMORY_MIB,
            )
            if role == "storage":
                vm.drives = [
                    {"serial": f"NODEOS-{name}-{k}", "path": str(drive_dir / f"{name}-nvme{k}.img")}
                    for k in range(drives)
                ]
            vms.append(vm)
    return vms
