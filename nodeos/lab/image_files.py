"""What of the nodeos package the appliance image carries: the product, never the test tooling.

The simulator and linearizability checker (`nodeos/devtools`) and this lab (`nodeos/lab`) drive
the product from outside; no product module imports them (tests/unit/test_layers.py), and the
image leaves them out. They come with the dev install (`pip install -e '.[dev]'`: the console
scripts `nodeos-lab`, `nodeos-sim`, `nodeos-lincheck`).
"""

from __future__ import annotations

from pathlib import Path

import nodeos

TOOLING = ("devtools", "lab")  # subpackages of nodeos that are test tooling


def product_files(pkg: Path | None = None) -> list[tuple[Path, str]]:
    """(file, path under dist-packages) of every file of the package `pkg` (nodeos) but the test
    tooling's and compiled bytecode."""
    pkg = pkg or Path(nodeos.__file__).resolve().parent
    out: list[tuple[Path, str]] = []
    for p in sorted(pkg.rglob("*")):
        rel = p.relative_to(pkg).parts
        if rel[0] in TOOLING or "__pycache__" in rel or not p.is_file() or p.name.endswith(".pyc"):
            continue
        out.append((p, str(p.relative_to(pkg.parent))))
    return out
