"""What the appliance image carries of Python: the product package `nodeos`, never the test tooling.

The test tooling (the lab, the simulator, the linearizability checker) is the package
`nodeos_devtools`, a distribution of its own (tests/tooling/pyproject.toml) that the dev install
brings with the console scripts `nodeos-lab`, `nodeos-sim`, `nodeos-lincheck`. No product module
imports it (tests/unit/test_layers.py). The image copies the product package's files and refuses a
product tree that holds the tooling or a module that imports it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nodeos

TOOLING_PACKAGE = "nodeos_devtools"
TOOLING_DIR = Path(__file__).resolve().parents[1]  # .../tests/tooling/nodeos_devtools
_IMPORTS_TOOLING = re.compile(rf"^\s*(from|import)\s+{TOOLING_PACKAGE}\b", re.MULTILINE)


class ToolingInProduct(RuntimeError):
    """The product tree holds test tooling: the image would carry it."""


def product_files(pkg: Path | None = None) -> list[tuple[Path, str]]:
    """(file, path under dist-packages) of every file of the package `pkg` (nodeos) but compiled
    bytecode; raises ToolingInProduct if the tooling sits inside it or a module of it imports the
    tooling (the image would then carry the tooling, or fail to import without it)."""
    pkg = pkg or Path(nodeos.__file__).resolve().parent
    if TOOLING_DIR.is_relative_to(pkg):
        raise ToolingInProduct(f"{TOOLING_DIR} is inside the product package {pkg}")
    out: list[tuple[Path, str]] = []
    for p in sorted(pkg.rglob("*")):
        rel = p.relative_to(pkg).parts
        if "__pycache__" in rel or not p.is_file() or p.name.endswith(".pyc"):
            continue
        if rel[0] == TOOLING_PACKAGE or (p.suffix == ".py" and _IMPORTS_TOOLING.search(p.read_text())):
            raise ToolingInProduct(f"{p} is, or imports, the test tooling ({TOOLING_PACKAGE})")
        out.append((p, str(p.relative_to(pkg.parent))))
    return out
