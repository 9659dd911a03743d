"""Labs shared by several test modules (one boot per shape per session), and the check that a
module left a shared lab as it found it.

A module opts in with `LAB = "one"` (or another key of SHAPES) instead of a dict of sizes. The
contract: every VM running and on the network, nodeosd active with no pool, volume or host in
its records, no LV, no nvmet subsystem or port, no NVMe connection on the GPU nodes, and (for a
cluster shape) every storage VM still a member. `problems()` checks exactly that after each
module; a lab found dirty is taken down (the next module boots a fresh one) and the module's
last test errors, naming what was left behind.
"""

from __future__ import annotations

import json
import os
from typing import Any

from nodeos.lab import Lab
from nodeos.lab.plan import missing_members

# CI's budget (60 min on a 2-core machine under TCG) cannot hold every crash step and every
# data plane primitive: CI runs a representative part (one step per recovery branch) and
# NODEOS_LAB_FULL=1 runs all of it (docs/testing.md, "The lab tier and CI's budget").
LAB_FULL = os.environ.get("NODEOS_LAB_FULL") == "1"
NOT_FULL = "exhaustive lab test: runs with NODEOS_LAB_FULL=1 (CI's 60-minute budget; docs/testing.md)"


def steps(all_steps: list[str], ci_steps: list[str]) -> list[str]:
    """The crash steps a run covers: all of them with NODEOS_LAB_FULL=1, else CI's part."""
    assert set(ci_steps) <= set(all_steps), sorted(set(ci_steps) - set(all_steps))
    return list(all_steps) if LAB_FULL else list(ci_steps)


SHAPES: dict[str, dict[str, Any]] = {
    # One storage VM with two drives and two GPU nodes: every single-node module fits in it.
    "one": dict(storage=1, drives=2, hosts=2, drive_size_mib=512),
    # Three storage VMs formed into one cluster (racks a, b, c once labels exist) and a GPU node;
    # two with NODEOS_LAB_FULL=1, for the published volumes read by two hosts at once (CI runs
    # none of those, and a second idle VM under TCG costs every cluster3 module CPU).
    "cluster3": dict(storage=3, drives=1, hosts=2 if LAB_FULL else 1, drive_size_mib=512, cluster=True),
}

STORAGE_SCRIPT = """
systemctl is-active nodeosd.service || true
echo @@
nodeos pool list --json 2>/dev/null || true
echo @@
nodeos volume list --json 2>/dev/null || true
echo @@
nodeos host list --json 2>/dev/null || true
echo @@
lvs --noheadings -o vg_name,lv_name 2>/dev/null || true
echo @@
cd /sys/kernel/config/nvmet 2>/dev/null && find subsystems ports -mindepth 1 -maxdepth 1 || true
"""


def up_kwargs(shape: str) -> dict[str, Any]:
    kw = dict(SHAPES[shape])
    if kw.get("cluster"):
        from nodeos.lab.cluster import label_command_available

        # Default rack labels once `nodeos node label` exists; until then a cluster without labels.
        kw["labels"] = None if label_command_available() else []
    return kw


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def problems(lab: Lab, shape: str) -> list[str]:
    """What a module left behind in a shared lab (empty: clean)."""
    found: list[str] = []
    status = lab.status()
    for v in status["vms"]:
        if v["state"] != "running":
            found.append(f"{v['name']} is {v['state']}")
    if found:
        return found
    for vm in lab.storage_vms:
        r = lab.sh(vm, STORAGE_SCRIPT, timeout=600, check=False)
        parts = r.stdout.split("@@\n")
        if len(parts) != 6:
            return [f"{vm}: cleanliness check failed: {r.stdout[-300:]} {r.stderr[-300:]}"]
        active, pools, vols, hosts, lvs, nvmet = parts
        if active.strip() != "active":
            found.append(f"{vm}: nodeosd is {active.strip()}")
        for what, text in (("pools", pools), ("volumes", vols), ("hosts", hosts)):
            if _json(text) != []:
                found.append(f"{vm}: nodeosd still has {what}: {str(_json(text))[:200]}")
        if lvs.strip():
            found.append(f"{vm}: LVs left: {' '.join(lvs.split())[:200]}")
        if nvmet.split():
            found.append(f"{vm}: nvmet objects left: {' '.join(nvmet.split())[:200]}")
    for vm in lab.host_vms:
        ctrls = lab.sh(vm, "ls /sys/class/nvme 2>/dev/null || true").stdout.split()
        if ctrls:
            found.append(f"{vm}: NVMe controllers still connected: {' '.join(ctrls)}")
    if SHAPES[shape].get("cluster") and not found:
        from nodeos.lab.cluster import cluster_status

        first = lab.storage_vms[0]
        missing = missing_members(cluster_status(lab, first), lab.storage_vms)
        if missing:
            found.append(f"not cluster members any more: {', '.join(missing)}")
    return found
