"""What the node service needs to know about the hardware: drives (with health) and which
storage addresses can carry RDMA.

Drives come from nodeos.hw when it provides `list_drives()` (SMART included); otherwise a
plain sysfs scan of /sys/class/nvme gives the drives without health ("unknown"). Every drive
is a dict: id, name, path, model, serial, firmware, size_bytes, health (ok|failing|unknown),
and whatever else the inventory reports (e.g. smart).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from pathlib import Path
from typing import Any

LOG = logging.getLogger("nodeosd.inventory")
SYS_NVME = Path("/sys/class/nvme")
SYS_BLOCK = Path("/sys/block")
SYS_IB = Path("/sys/class/infiniband")


def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return ""


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return dict(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "to_dict"):
        return dict(obj.to_dict())
    return dict(vars(obj))


def _normalise(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    d.setdefault("name", os.path.basename(str(d.get("path") or "")) or d.get("id"))
    d["id"] = str(d.get("id") or d.get("serial") or d.get("name"))
    health = d.get("health")
    if isinstance(health, dict):  # e.g. {"state": "failing", ...}
        health = health.get("state") or health.get("status")
    if isinstance(health, bool):
        health = "ok" if health else "failing"
    d["health"] = (
        str(health)
        if health in ("ok", "failing", "unknown")
        else ("failing" if d.get("failing") else "unknown" if health is None else str(health))
    )
    return d


def sysfs_drives(sys_nvme: Path = SYS_NVME) -> list[dict[str, Any]]:
    """NVMe namespaces from sysfs: one drive per namespace block device."""
    out: list[dict[str, Any]] = []
    if not sys_nvme.is_dir():
        return out
    for ctrl in sorted(sys_nvme.iterdir()):
        serial = _read(ctrl / "serial")
        for ns in sorted(ctrl.glob(f"{ctrl.name}n*")) or sorted((SYS_BLOCK).glob(f"{ctrl.name}n*")):
            if "p" in ns.name[len(ctrl.name) + 1 :]:
                continue  # a partition
            sectors = _read(ns / "size") or _read(SYS_BLOCK / ns.name / "size")
            nsid = ns.name.split("n")[-1]
            out.append(
                {
                    "id": f"{serial}-n{nsid}" if serial else ns.name,
                    "name": ns.name,
                    "path": f"/dev/{ns.name}",
                    "model": _read(ctrl / "model"),
                    "serial": serial,
                    "firmware": _read(ctrl / "firmware_rev"),
                    "size_bytes": int(sectors) * 512 if sectors.isdigit() else 0,
                    "health": "unknown",
                }
            )
    return out


def list_drives() -> list[dict[str, Any]]:
    try:
        hw = importlib.import_module("nodeos.hw")
        fn = getattr(hw, "list_drives", None)
        if fn is None:
            hw = importlib.import_module("nodeos.hw.nvme")
            fn = getattr(hw, "list_drives", None)
    except ImportError:
        fn = None
    if fn is not None:
        try:
            return [_normalise(_as_dict(d)) for d in fn()]
        except Exception as exc:  # inventory trouble must not take the daemon down
            LOG.warning("drive inventory failed, falling back to sysfs: %s", exc)
    return [_normalise(d) for d in sysfs_drives()]


def rdma_netdevs(sys_ib: Path = SYS_IB) -> set[str]:
    """Net devices that carry an RDMA port (RoCE, Soft-RoCE, iWARP)."""
    out: set[str] = set()
    if not sys_ib.is_dir():
        return out
    for dev in sys_ib.iterdir():
        for port in (dev / "ports").glob("*"):
            for nd in (port / "gid_attrs" / "ndevs").glob("*"):
                name = _read(nd)
                if name:
                    out.add(name)
    return out


def rdma_addresses(addresses: list[str]) -> set[str]:
    """Which of `addresses` sit on a net device with an RDMA port."""
    devs = rdma_netdevs()
    if not devs:
        return set()
    try:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
            found = set()
            for a in ipr.get_addr():
                if names.get(a["index"]) in devs:
                    found.add(a.get_attr("IFA_ADDRESS"))
    except Exception as exc:
        LOG.warning("cannot map RDMA devices to addresses: %s", exc)
        return set()
    return {a for a in addresses if a in found}
