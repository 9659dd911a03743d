"""`nodeos drive`: the node's NVMe drives whichever side owns them (the kernel's nvme driver, or
SPDK through vfio-pci / uio_pci_generic), and handing one to SPDK (`claim`) and back (`release`)
by PCI address. The daemon decides (nodeos/hw/pci.py, nodeos/control/drive_api.py); a drive
that must not move (the boot drive, a mounted file system, a pool's drive) is refused, exit 2,
naming the field."""

from __future__ import annotations

from typing import Any

import click

from nodeos.cli.node import _client, _size
from nodeos.cli.output import command_runner, json_option, table
from nodeos.hw.pci import check_address


@click.group()
def drive() -> None:
    """NVMe drives of this node (kernel- or SPDK-owned): list, claim for SPDK, release."""


def _owner(r: dict[str, Any]) -> str:
    o = str(r.get("owner") or "kernel")
    return o + " (tests only)" if r.get("test_only") else o


@drive.command("list")
@json_option
@click.pass_context
@command_runner
def drive_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List drives with owner, PCI address, IOMMU group (vfio-pci takes a whole group), model,
    serial, size, health and pool."""
    rows = _client(ctx).call("drive.list")

    def human(rows: list[dict[str, Any]]) -> str:
        view = [
            dict(
                r,
                owner=_owner(r),
                address=r.get("address") or "-",
                iommu=r.get("iommu_group") or "-",
                size=_size(r.get("size_bytes")),
                pool=r.get("pool") or ("-" if r.get("usable", True) else "(not usable here)"),
            )
            for r in rows
        ]
        cols = ["id", "owner", "address", "iommu", "path", "model", "serial", "firmware", "size", "health"]
        cols.append("pool")
        lines = [table(view, cols)]
        for r in rows:
            if not r.get("usable", True) and r.get("unusable"):
                lines.append(f"NOTE      {r['id']}: {r['unusable']}")
            for why in r.get("health_reasons") or []:
                if r.get("health") == "failing":
                    lines.append(f"FAILING   {r['id']}: {why}")
        return "\n".join(lines)

    return rows, human


@drive.command("claim")
@click.argument("address")
@json_option
@click.pass_context
@command_runner
def drive_claim(ctx: click.Context, address: str, as_json: bool) -> tuple[Any, Any]:
    """Hand the NVMe drive at PCI ADDRESS (0000:01:00.0) to SPDK: bound to vfio-pci (uio_pci_generic
    without an IOMMU) and attached by the SPDK target. Refused for the boot drive and a drive in use."""
    r = _client(ctx).call("drive.claim", {"address": check_address(address)})
    done = "handed to SPDK" if r["changed"] else "already SPDK's"
    text = f"drive {r['address']} {done} ({r['driver']}{', attached' if r.get('attached') else ''})"
    return r, "\n".join([text, *(f"NOTE      {n}" for n in r.get("notes") or [])])


@drive.command("release")
@click.argument("address")
@json_option
@click.pass_context
@command_runner
def drive_release(ctx: click.Context, address: str, as_json: bool) -> tuple[Any, Any]:
    """Give the NVMe drive at PCI ADDRESS back to the kernel's nvme driver (detached from SPDK
    first). Refused while a pool is made of it."""
    r = _client(ctx).call("drive.release", {"address": check_address(address)})
    done = "given back to the kernel" if r["changed"] else "already the kernel's"
    return r, f"drive {r['address']} {done} (nvme{', detached from SPDK' if r.get('detached') else ''})"
