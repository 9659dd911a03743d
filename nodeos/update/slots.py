"""This machine's A/B root slots as the updater sees them (`nodeos node show`: `slots`).

Read from RAUC (`rauc status --detailed --output-format=json`) and systemd-boot's boot
assessment of the booted entry (`systemd-bless-boot status`); the mapping to good / bad /
trying is pure (`slot_views`). A machine without RAUC's system configuration has no slots (the
lab's direct-kernel VMs, a development host): that is said, never invented.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

RAUC_SYSTEM_CONF = Path("/etc/rauc/system.conf")
BLESS_BOOT = Path("/usr/lib/systemd/systemd-bless-boot")


def _slot_items(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """`rauc status` JSON lists slots as [{name: {...}}, ...]."""
    out: list[tuple[str, dict[str, Any]]] = []
    for item in doc.get("slots") or []:
        if isinstance(item, dict):
            out.extend((str(k), v) for k, v in item.items() if isinstance(v, dict))
    return out


def slot_views(doc: dict[str, Any], *, running: str, bless: str | None) -> list[dict[str, Any]]:
    """[{name, version, state}] of the root slots in RAUC's status `doc`.

    state: `bad` when the boot loader gave up on it (RAUC's boot_status bad); `trying` for the
    primary slot that has not yet passed its health gate: written and not yet booted, or booted
    while systemd-boot still counts its tries (`bless` = systemd-bless-boot's status of the
    booted entry: indeterminate); else `good`. The version is the one of the bundle RAUC wrote
    to it, or this release for the booted slot of a factory image (never written by RAUC)."""
    primary = doc.get("boot_primary")
    views = []
    for name, s in _slot_items(doc):
        if s.get("class") not in (None, "rootfs"):
            continue
        booted = s.get("state") == "booted"
        bundle = (s.get("slot_status") or {}).get("bundle") or {}
        version = bundle.get("version") or (running if booted else None)
        if s.get("boot_status") == "bad":
            state = "bad"
        elif booted and bless == "indeterminate":
            state = "trying"
        elif name == primary and not booted:
            state = "trying"  # written, boots next with a counter
        else:
            state = "good"
        views.append(
            {"name": s.get("bootname") or name, "version": version, "state": state, "booted": booted}
        )
    return views


def read_slots(conf: Path = RAUC_SYSTEM_CONF, cmdline: str | None = None) -> dict[str, Any]:
    """`{"slots": [...]}`, or `{"slots": None, "slots_note": why}` on a machine without slots."""
    import nodeos

    if not conf.exists():
        return {
            "slots": None,
            "slots_note": f"no A/B slots on this machine (no {conf}: not booted from the disk image)",
        }
    from nodeos.update.backend import booted_slot

    if booted_slot(cmdline) is None:  # the image's files, booted without its disk (the lab's kernel boot)
        return {
            "slots": None,
            "slots_note": "no A/B slots on this machine (no rauc.slot= on the kernel command line: "
            "not booted from the disk image)",
        }
    rauc = shutil.which("rauc")
    if rauc is None:
        return {"slots": None, "slots_note": f"{conf} exists but rauc is not installed"}
    proc = subprocess.run(
        [rauc, f"--conf={conf}", "status", "--detailed", "--output-format=json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        return {"slots": None, "slots_note": f"rauc status failed: {proc.stderr.strip()[-300:]}"}
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return {"slots": None, "slots_note": "rauc status printed no JSON"}
    bless = None
    if BLESS_BOOT.exists():
        b = subprocess.run(
            [str(BLESS_BOOT), "status"], capture_output=True, text=True, timeout=30, check=False
        )
        bless = b.stdout.strip() or None
    return {"slots": slot_views(doc, running=nodeos.__version__, bless=bless)}
