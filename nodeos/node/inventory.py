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

from nodeos.sysfs import read_attr

LOG = logging.getLogger("nodeosd.inventory")
SYS_NVME = Path("/sys/class/nvme")
SYS_BLOCK = Path("/sys/block")
SYS_IB = Path("/sys/class/infiniband")


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
        serial = read_attr(ctrl / "serial")
        for ns in sorted(ctrl.glob(f"{ctrl.name}n*")) or sorted((SYS_BLOCK).glob(f"{ctrl.name}n*")):
            if "p" in ns.name[len(ctrl.name) + 1 :]:
                continue  # a partition
            sectors = read_attr(ns / "size") or read_attr(SYS_BLOCK / ns.name / "size")
            nsid = ns.name.split("n")[-1]
            out.append(
                {
                    "id": drive_id(serial, nsid, ns.name),
                    "name": ns.name,
                    "path": f"/dev/{ns.name}",
                    "controller": ctrl.name,
                    "model": read_attr(ctrl / "model"),
                    "serial": serial,
                    "firmware": read_attr(ctrl / "firmware_rev"),
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


def kernel_drives() -> list[dict[str, Any]]:
    """Drives the kernel holds, with SMART health from nvme-cli (nodeos.hw.nvme); sysfs without
    health otherwise."""
    try:
        hw = importlib.import_module("nodeos.hw.nvme")
        drives = hw.NvmeCli().inventory(previous=dict(_previous_smart))
    except Exception as exc:  # no nvme-cli, or the inventory failed: still list what sysfs knows
        LOG.debug("nvme-cli inventory unavailable (%s); using sysfs", exc)
        return [_normalise(d) for d in sysfs_drives()]
    for d in drives:
        if d.smart is not None:
            _previous_smart[d.serial] = d.smart
    return [from_hw(d) for d in drives]


def list_drives(dataplane: Any = None) -> list[dict[str, Any]]:
    """Every data drive of this machine whichever side owns it (owner kernel, spdk, none, or
    test), each marked usable or not by this node's data plane (`dataplane`: the data plane
    object; SPDK-owned drives get inventory and SMART from its target)."""
    from nodeos.hw import pci

    try:
        functions = pci.Sysfs().functions()
    except OSError as exc:
        LOG.warning("cannot read PCI functions from sysfs: %s", exc)
        functions = []
    name = getattr(dataplane, "name", None)
    spdk: list[dict[str, Any]] = []
    if name == "spdk":
        from nodeos.dataplane.spdk.drives import pcie_drives

        try:
            spdk = pcie_drives(dataplane, previous=dict(_previous_smart))
        except Exception as exc:  # a dead target shows in status (dpwatch); still list the rest
            LOG.warning("cannot read the drives SPDK holds: %s", exc)
        for d in spdk:
            if d.get("smart") is not None and d.get("serial"):
                from nodeos.hw.nvme import Smart

                _previous_smart[d["serial"]] = Smart(**d["smart"])
    return merge_owned(kernel_drives(), functions, spdk, test_drives(), name)


def merge_owned(
    kernel: list[dict[str, Any]],
    functions: list[Any],
    spdk: list[dict[str, Any]],
    tests: list[dict[str, Any]],
    dataplane: str | None,
) -> list[dict[str, Any]]:
    """The drive list (pure): kernel rows, SPDK's rows, PCI NVMe functions SPDK's driver holds
    that its target has not attached (or that no driver holds), and test drives (AIO files,
    malloc: `test_only`). A drive this node's data plane cannot use is `usable: false` with why."""
    by_ctrl = {c: f for f in functions for c in f.controllers}
    claim = "`nodeos drive claim {}` hands it to SPDK"
    out: list[dict[str, Any]] = []
    for d in kernel:
        f = by_ctrl.get(str(d.get("controller") or ""))
        addr = d.get("address") or (f.address if f is not None else "")
        row = dict(d, owner="kernel", address=addr, usable=dataplane != "spdk")
        if dataplane == "spdk":
            row["unusable"] = "owned by the kernel; " + claim.format(addr or "PCI_ADDRESS")
        out.append(row)
    seen = {d["address"] for d in spdk}
    for d in spdk:
        row = dict(d, usable=dataplane == "spdk")
        if dataplane != "spdk":
            row["unusable"] = "owned by SPDK, and this node runs the kernel data plane"
        out.append(row)
    for f in functions:
        if f.address in seen or f.owner == "kernel":
            continue
        why = (
            "bound to " + f.driver + ", not attached by the SPDK target (not running?)"
            if f.owner == "spdk"
            else f"held by {f.owner}; " + claim.format(f.address)
        )
        out.append(
            {
                "id": f"pcie:{f.address}",
                "name": f.address,
                "path": f"pcie:{f.address}",
                "model": "",
                "serial": "",
                "firmware": "",
                "size_bytes": 0,
                "address": f.address,
                "owner": f.owner,
                "health": "unknown",
                "health_reasons": [why],
                "usable": f.owner == "spdk" and dataplane == "spdk",
                **({} if f.owner == "spdk" and dataplane == "spdk" else {"unusable": why}),
            }
        )
    groups = {f.address: f.iommu_group for f in functions}
    out = [dict(r, iommu_group=groups.get(str(r.get("address") or ""))) for r in out]
    out += [dict(d, owner="test", test_only=True, usable=True) for d in tests]
    return out


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
                name = read_attr(nd)
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
