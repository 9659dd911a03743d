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

import os
from typing import Any

from nodeos_devtools.lab import Lab
from nodeos_devtools.lab.leftovers import leftovers
from nodeos_devtools.lab.plan import missing_members

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


def up_kwargs(shape: str) -> dict[str, Any]:
    kw = dict(SHAPES[shape])
    if kw.get("cluster"):
        from nodeos_devtools.lab.cluster import label_command_available

        # Default rack labels once `nodeos node label` exists; until then a cluster without labels.
        kw["labels"] = None if label_command_available() else []
    return kw


def problems(lab: Lab, shape: str) -> list[str]:
    """What a module left behind in a shared lab (empty: clean)."""
    # The same check as the soak's end (tests/tooling/nodeos_devtools/lab/leftovers.py), without its deep part
    # (md
    # arrays, remote controllers, intents): this contract is the one docs/lab.md states.
    found = leftovers(lab)
    if SHAPES[shape].get("cluster") and not found:
        from nodeos_devtools.lab.cluster import cluster_status

        first = lab.storage_vms[0]
        missing = missing_members(cluster_status(lab, first), lab.storage_vms)
        if missing:
            found.append(f"not cluster members any more: {', '.join(missing)}")
    return found
