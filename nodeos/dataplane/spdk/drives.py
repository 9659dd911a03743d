"""The PCIe NVMe drives SPDK holds: inventory and SMART health from the target itself
(`bdev_nvme_get_controllers`, `bdev_nvme_get_controller_health_info`, `bdev_get_bdevs`), and
detaching one before it goes back to the kernel.

`drive_rows()` is pure (tested against answers shaped as SPDK v26.05 writes them:
module/bdev/nvme/bdev_nvme_rpc.c); `pcie_drives()` / `detach_pcie()` make the calls.
"""

from __future__ import annotations

import re
from typing import Any

from nodeos.dataplane.spdk import requests as rq
from nodeos.errors import BadInput
from nodeos.hw.nvme import Smart, assess


def controller_name(address: str) -> str:
    """The bdev_nvme controller name nodeos gives the drive at a PCI address (backend.py)."""
    return "nvme_" + re.sub(r"[^0-9a-fA-F]", "", address)


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def smart_of(h: dict[str, Any]) -> Smart:
    """bdev_nvme_get_controller_health_info -> the same Smart the kernel side reads (nvme-cli)."""
    return Smart(
        critical_warning=_int(h.get("critical_warning")) or 0,
        percent_used=_int(h.get("percentage_used")) or 0,
        media_errors=_int(h.get("media_errors")) or 0,
        temperature_c=_int(h.get("temperature_celsius")),
        available_spare=_int(h.get("available_spare_percentage")),
        spare_threshold=_int(h.get("available_spare_threshold_percentage")),
        power_on_hours=_int(h.get("power_on_hours")),
        unsafe_shutdowns=_int(h.get("unsafe_shutdowns")),
    )


def pcie_controllers(controllers: list[dict[str, Any]]) -> dict[str, str]:
    """bdev_nvme_get_controllers -> PCI address -> controller name (fabrics ones left out)."""
    out: dict[str, str] = {}
    for c in controllers:
        for path in c.get("ctrlrs") or []:
            trid = path.get("trid") or {}
            if str(trid.get("trtype", "")).lower() == "pcie" and trid.get("traddr"):
                out[str(trid["traddr"]).lower()] = str(c.get("name"))
    return out


def drive_rows(
    controllers: list[dict[str, Any]],
    health: dict[str, dict[str, Any] | str],
    bdevs: dict[str, dict[str, Any]],
    previous: dict[str, Smart] | None = None,
) -> list[dict[str, Any]]:
    """One drive per PCIe controller SPDK has attached. `health`: controller name -> the health
    answer, or the error text when SPDK could not read it; `bdevs`: controller name -> its first
    namespace bdev (<name>n1)."""
    rows = []
    for address, name in sorted(pcie_controllers(controllers).items()):
        h = health.get(name)
        b = bdevs.get(name) or {}
        smart = smart_of(h) if isinstance(h, dict) else None
        reasons: tuple[str, ...] = (f"SMART unreadable: {h}",) if isinstance(h, str) else ()
        nvme = (b.get("driver_specific") or {}).get("nvme") or [{}]
        cdata = (nvme[0] if isinstance(nvme, list) and nvme else {}).get("ctrlr_data") or {}
        info = {**cdata, **(h if isinstance(h, dict) else {})}  # the bdev knows them too
        serial = str(info.get("serial_number") or "")
        if smart is not None:
            reasons = assess(smart, (previous or {}).get(serial))
        rows.append(
            {
                "id": serial or f"pcie:{address}",
                "name": name,
                "path": f"pcie:{address}",
                "controller": name,
                "model": str(info.get("model_number") or ""),
                "serial": serial,
                "firmware": str(info.get("firmware_revision") or ""),
                "size_bytes": int(b.get("num_blocks") or 0) * int(b.get("block_size") or 0),
                "nsid": 1,
                "transport": "pcie",
                "address": address,
                "owner": "spdk",
                "health": "failing" if reasons else ("ok" if smart is not None else "unknown"),
                "health_reasons": list(reasons),
                "smart": smart.__dict__ if smart is not None else None,
            }
        )
    return rows


def pcie_drives(dp: Any, previous: dict[str, Smart] | None = None) -> list[dict[str, Any]]:
    """The drives the SPDK target behind `dp` (SpdkDataPlane) has attached over PCIe."""
    controllers = dp.call(rq.nvme_get_controllers()) or []
    health: dict[str, dict[str, Any] | str] = {}
    bdevs: dict[str, dict[str, Any]] = {}
    for name in pcie_controllers(controllers).values():
        try:
            health[name] = dp.call(rq.nvme_health(name))
        except Exception as e:  # one drive's unreadable log page does not hide the others
            health[name] = getattr(e, "message", str(e))
        found = dp._maybe(rq.get_bdevs(name + "n1")) or []
        if found:
            bdevs[name] = found[0]
    return drive_rows(controllers, health, bdevs, previous)


def detach_pcie(dp: Any, address: str) -> bool:
    """Detach the controller SPDK holds at `address` (its bdevs go with it). False: none held."""
    name = pcie_controllers(dp.call(rq.nvme_get_controllers()) or []).get(address.lower())
    if name is None:
        return False
    claimed = [b["name"] for b in dp._maybe(rq.get_bdevs(name + "n1")) or [] if b.get("claimed")]
    if claimed:
        raise BadInput(
            f"drive {address} is in use in the SPDK target ({claimed[0]} is claimed by a raid or lvstore); "
            "delete its pool first",
            field="address",
        )
    dp.call(rq.nvme_detach(name))
    return True
