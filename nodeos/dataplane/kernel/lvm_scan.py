"""Which block devices LVM may read: never a remote leg, an md array or a device-mapper view.

LVM scans every block device for labels, by opening and reading it. On a primary that means
its mirror's remote legs (NVMe-oF namespaces), the md array over them and the linear views
(device-mapper) in front of it. A leg whose path is lost queues I/O until its controller is
cut (issue 25: md's superblock write requeued for ever on a leg whose replica went away), and
an `lvs` reading it then sits in the kernel (D state) where no timeout can kill it, holding
whatever waited for it. nodeos' pools live only on local drives, so every command carries a
global filter that accepts those alone; reading it costs a sysfs walk, no I/O.

`global_filter` is the rule (pure); `fabric_namespaces` reads sysfs (the edge).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from nodeos.sysfs import read_attr

SYS_BLOCK = Path("/sys/block")
LOCAL_TRANSPORTS = ("pcie",)  # what a drive of this machine is attached by
_NS_RE = re.compile(r"^nvme\d+n\d+$")  # namespaces and multipath heads, not nvmeXcYnZ paths
# Disks of other kinds that may hold a pool, by kernel name (whole disks and partitions).
OTHER_DISKS = r"^/dev/(sd|vd|xvd|hd)[a-z]+[0-9]*$"


def global_filter(local_devices: Iterable[str]) -> str:
    """Pure: the `devices { global_filter }` setting that lets LVM read `local_devices` (kernel
    names of this machine's NVMe namespaces, e.g. "nvme0n1", and their partitions) and other
    local disks (OTHER_DISKS), and nothing else: no fabric namespace, md array or
    device-mapper device. An allow list, because LVM accepts a device when ANY of its names
    meets an accepting rule first (lvm.conf(5)): a deny list ending in "a|.*|" let a remote
    leg or a view in through its /dev/disk/by-id alias (the lab's stuck `lvs`, issue 25)."""
    pats = [f"^/dev/{re.escape(d)}(p[0-9]+)?$" for d in sorted(set(local_devices))]
    rules = ", ".join([*(f'"a|{p}|"' for p in [*pats, OTHER_DISKS]), '"r|.*|"'])
    return f"devices {{ global_filter = [ {rules} ] }}"


def _transports(dev: Path) -> set[str]:
    """The transports of the controllers behind block device `dev`: its own controller for a
    plain namespace, every controller of its subsystem for a multipath head."""
    own = read_attr(dev / "device" / "transport")
    if own:
        return {own}
    out = set()
    try:
        for c in (dev / "device").iterdir():
            if c.name.startswith("nvme"):
                t = read_attr(c / "transport")
                if t:
                    out.add(t)
    except OSError:
        pass
    return out


def fabric_namespaces(sys_block: Path = SYS_BLOCK) -> list[str]:
    """Kernel names of the NVMe namespaces reached over a fabric (tcp, rdma, fc, loop): never a
    drive of this machine."""
    out = []
    for dev in sorted(sys_block.glob("nvme*n*")):
        if _NS_RE.match(dev.name) and _transports(dev) - set(LOCAL_TRANSPORTS):
            out.append(dev.name)
    return out


def local_namespaces(sys_block: Path = SYS_BLOCK) -> list[str]:
    """Kernel names of the NVMe namespaces that are not reached over a fabric: this machine's
    drives (one whose transport cannot be read is counted here, left to LVM)."""
    fabric = set(fabric_namespaces(sys_block))
    names = [d.name for d in sorted(sys_block.glob("nvme*n*"))]
    return [n for n in names if _NS_RE.match(n) and n not in fabric]


def with_filter(cmd: list[str], setting: str) -> list[str]:
    """Pure: `cmd` with `setting` in its --config (merged into one there already: LVM reads one
    --config string per command)."""
    if "--config" in cmd:
        i = cmd.index("--config")
        return [*cmd[: i + 1], f"{cmd[i + 1]} {setting}", *cmd[i + 2 :]]
    return [cmd[0], "--config", setting, *cmd[1:]]
