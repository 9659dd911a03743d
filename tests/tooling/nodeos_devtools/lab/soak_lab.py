"""`nodeos-lab soak`: the soak (tests/tooling/nodeos_devtools/lab/soak.py) on a cluster lab that is up, or on
one it boots."""

from __future__ import annotations

from typing import Any

from nodeos.errors import AlreadyExists, BadInput, NotFound
from nodeos_devtools.lab.lab import Lab
from nodeos_devtools.lab.soak import Soak
from nodeos_devtools.lab.soak_plan import FAULTS
from nodeos_devtools.lab.soak_report import Report

SOAK_LAB = dict(storage=3, drives=1, hosts=1, drive_size_mib=1024)  # soak_plan.DEFAULT_SHAPE
SOAK_LAB_NAME = "soak"


def soak_lab(
    seed: int,
    minutes: float,
    lab_name: str | None,
    *,
    hog: bool = False,
    steps: int | None = None,
    faults: tuple[str, ...] = FAULTS,
    bound_scale: float = 1.0,
    keep: bool = False,
) -> Report:
    """`nodeos-lab soak`: on cluster lab `lab_name` (up), or on one it boots (3 storage VMs, a GPU
    node, as `nodeos-lab up --cluster`) and takes down after, unless `keep`."""
    kw: dict[str, Any] = dict(hog=hog, steps=steps, faults=faults, bound_scale=bound_scale)
    if lab_name:
        lab = Lab(lab_name)
        if not lab.is_up():
            raise NotFound(f"lab {lab_name!r} is not up", field="lab", allowed=lab.all_names())
        if "cluster" not in lab.status():
            raise BadInput(
                f"lab {lab_name!r} is not a cluster lab (`nodeos-lab up ... --cluster`)", field="lab"
            )
        return Soak(lab, seed, minutes=minutes, **kw).run()
    lab = Lab(SOAK_LAB_NAME)
    if lab.is_up():
        raise AlreadyExists(
            f"lab {SOAK_LAB_NAME!r} is up already: soak it with --lab {SOAK_LAB_NAME}, or take it down first",
            field="lab",
        )
    from nodeos_devtools.lab.cluster import label_command_available

    lab.up(**SOAK_LAB, cluster=True, labels=None if label_command_available() else [])
    try:
        return Soak(lab, seed, minutes=minutes, **kw).run()
    finally:
        if not keep:
            lab.down()
