"""What the node service needs to know about the hardware: drives (with health) and which
storage addresses can carry RDMA.

Drives come from nodeos.hw.nvme (nvme-cli, SMART included); without nvme-cli a plain sysfs
scan of /sys/class/nvme gives the drives without health ("unknown"). Every drive is a dict:
id (the serial; serial-n<nsid> for further namespaces), name, path, model, serial, firmware,
size_bytes, health (ok|failing|unknown), health_reasons and smart.

A drive a pool was made of that is no longer in the machine (hot-unplugged, or dead on the
PCIe bus) shows in the node's report with health "missing" and its pool as failed
(`missing_pool_drives`, `mark_missing`; the agent looks at every report pass).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
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


def _normalise(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    d.setdefault("name", os.path.basename(str(d.get("path") or "")) or d.get("id"))
    d["id"] = str(d.get("id") or d.get("serial") or d.get("name"))
    health = d.get("health")
    if health not in ("ok", "failing", "unknown"):
        health = "unknown"
    d["health"] = health
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
                    "id": drive_id(serial, nsid, ns.name),
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


_previous_smart: dict[str, Any] = {}  # per serial: SMART deltas (new media errors) need the last reading


def drive_id(serial: str, nsid: int | str, fallback: str) -> str:
    """Operators name drives by serial; a second namespace of one controller gets -n<nsid>."""
    if not serial:
        return fallback
    return serial if str(nsid) in ("1", "") else f"{serial}-n{nsid}"


def from_hw(d: Any) -> dict[str, Any]:
    """nodeos.hw.nvme.Drive -> the node service's drive dict."""
    reasons = [str(r) for r in (d.health or ())]
    return {
        "id": drive_id(d.serial, d.nsid, os.path.basename(d.device)),
        "name": os.path.basename(d.device),
        "path": d.device,
        "controller": d.controller,
        "model": d.model,
        "serial": d.serial,
        "firmware": d.firmware,
        "size_bytes": d.size_bytes,
        "nsid": d.nsid,
        "transport": d.transport,
        "address": d.address,
        "health": "failing" if reasons else ("ok" if d.smart is not None else "unknown"),
        "health_reasons": reasons,
        "smart": dataclasses.asdict(d.smart) if d.smart is not None else None,
    }


def test_drives() -> list[dict[str, Any]]:
    """Drives a test names in NODEOS_TEST_DRIVES (JSON list of {id, path, size_bytes}; path: an
    SPDK bdev such as a file-backed AIO drive) that no hardware scan finds. Tests only."""
    raw = os.environ.get("NODEOS_TEST_DRIVES")
    if not raw:
        return []
    return [_normalise(dict(d, health="unknown")) for d in json.loads(raw)]


def list_drives() -> list[dict[str, Any]]:
    """Drives with SMART health from nvme-cli (nodeos.hw.nvme); sysfs without health otherwise."""
    try:
        hw = importlib.import_module("nodeos.hw.nvme")
        drives = hw.NvmeCli().inventory(previous=dict(_previous_smart))
    except Exception as exc:  # no nvme-cli, or the inventory failed: still list what sysfs knows
        LOG.debug("nvme-cli inventory unavailable (%s); using sysfs", exc)
        return [_normalise(d) for d in sysfs_drives()] + test_drives()
    for d in drives:
        if d.smart is not None:
            _previous_smart[d.serial] = d.smart
    return [from_hw(d) for d in drives] + test_drives()


def present_drive_ids(sys_nvme: Path = SYS_NVME) -> set[str]:
    """The ids of the NVMe drives in the machine right now (a cheap sysfs scan: no SMART)."""
    return {str(d["id"]) for d in sysfs_drives(sys_nvme)}


def missing_pool_drives(pools: dict[str, list[str]], present: set[str]) -> dict[str, list[str]]:
    """pool id -> the drives of that pool no longer in the machine (pulled, or dead on the bus)."""
    out = {}
    for pool_id, drives in pools.items():
        gone = sorted(d for d in drives if d not in present)
        if gone:
            out[pool_id] = gone
    return out


def mark_missing(
    drives: dict[str, dict[str, Any]], missing: dict[str, list[str]]
) -> dict[str, dict[str, Any]]:
    """The drive report with every missing pool drive in it as health "missing" (a drive that
    left the machine drops out of the inventory; its pool still names it)."""
    out = dict(drives)
    for ids in missing.values():
        for d in ids:
            out[d] = {**(drives.get(d) or {"serial": d}), "health": "missing"}
    return out


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
    from nodeos.hw.addrs import interface_addresses  # not pyroute2: see there

    try:
        found = {addr for ifname, addr in interface_addresses() if ifname in devs}
    except (OSError, ValueError) as exc:
        LOG.warning("cannot map RDMA devices to addresses: %s", exc)
        return set()
    return {a for a in addresses if a in found}
