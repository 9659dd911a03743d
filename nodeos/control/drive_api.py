"""The control API of this node's drives: list them whichever side owns them, hand one to SPDK
(`drive.claim`) and back to the kernel (`drive.release`). A collaborator of the control service:
`ControlService.methods()` takes `DriveApi(service).methods()`.

The decisions are pure (nodeos/hw/pci.py: never the boot drive, never a drive in use, never a
drive a pool is made of); this module gathers the facts, binds, and attaches or detaches the
controller in the SPDK target when this node runs one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeos.hw import pci

LOG = logging.getLogger("nodeosd.control")


class DriveApi:
    def __init__(self, service: Any, sysfs: pci.Sysfs | None = None) -> None:
        self.service = service
        self.sysfs = sysfs or pci.Sysfs()

    def methods(self) -> dict[str, Any]:
        return {
            "drive.list": self.drive_list,
            "drive.claim": self.drive_claim,
            "drive.release": self.drive_release,
        }

    @property
    def dp(self) -> Any:
        return self.service.ctx.dataplane

    def _used(self) -> dict[str, str]:
        """drive id -> the pool of this node made of it."""
        d = self.service._driver_or_none()
        if d is None:
            return {}
        return {
            dr: p["name"] for p in d.map.state["pools"].values() if p["node"] == d.id for dr in p["drives"]
        }

    async def drive_list(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        from nodeos.node import inventory

        drives = await asyncio.to_thread(inventory.list_drives, self.dp)
        used = self._used()
        return [dict(x, pool=used.get(x["id"])) for x in drives]

    def _claim_facts(self, address: str) -> tuple[Any, ...]:
        s = self.sysfs
        functions = s.functions()
        f = next((x for x in functions if x.address == address), None)
        group = s.group(f.iommu_group) if f is not None else ()
        return functions, s.mounts(), s.swaps(), s.iommu(), group

    async def drive_claim(self, params: dict[str, Any]) -> dict[str, Any]:
        address = pci.check_address(params.get("address"))
        facts = await asyncio.to_thread(self._claim_facts, address)
        plan = pci.claim_plan(address, *facts)
        if plan.driver is not None:
            for a in (*plan.also, plan.address):
                await asyncio.to_thread(self.sysfs.bind, a, plan.driver)
            LOG.warning("drive %s handed to SPDK (%s: %s)", plan.address, plan.driver, plan.why)
        attached = False
        if getattr(self.dp, "name", None) == "spdk":
            for a in (*plan.also, plan.address):
                await asyncio.to_thread(self.dp.attach_nvme_pcie, a)
            attached = True
        return {
            "address": plan.address,
            "driver": plan.driver or next(f.driver for f in facts[0] if f.address == plan.address),
            "changed": plan.driver is not None,
            "why": plan.why,
            "notes": list(plan.notes),
            "also": list(plan.also),
            "attached": attached,
        }

    async def drive_release(self, params: dict[str, Any]) -> dict[str, Any]:
        from nodeos.node import inventory

        address = pci.check_address(params.get("address"))
        drives = await asyncio.to_thread(inventory.list_drives, self.dp)
        used = self._used()
        pools = {str(d.get("address")): used[d["id"]] for d in drives if d["id"] in used and d.get("address")}
        functions = await asyncio.to_thread(self.sysfs.functions)
        plan = pci.release_plan(address, functions, pools)
        detached = False
        if getattr(self.dp, "name", None) == "spdk":
            from nodeos.dataplane.spdk.drives import detach_pcie

            detached = await asyncio.to_thread(detach_pcie, self.dp, plan.address)
        if plan.driver is not None:
            await asyncio.to_thread(self.sysfs.bind, plan.address, plan.driver)
            LOG.warning("drive %s given back to the kernel (%s)", plan.address, plan.why)
        return {
            "address": plan.address,
            "driver": plan.driver or "nvme",
            "changed": plan.driver is not None,
            "why": plan.why,
            "detached": detached,
        }
