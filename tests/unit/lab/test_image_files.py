"""The image's install step (nodeos/lab/image_files.py): the appliance carries the product
package, never the test tooling, and what it carries imports and runs without it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from nodeos.lab import image_files
from nodeos.lab.image import SCRIPTS

_IMPORT_ALL = """
import importlib, pkgutil, sys
import nodeos
assert nodeos.__file__.startswith(sys.argv[1]), nodeos.__file__
names = [m.name for m in pkgutil.walk_packages(nodeos.__path__, "nodeos.")]
for name in names:
    importlib.import_module(name)
for tool in ("nodeos.devtools", "nodeos.lab"):
    try:
        importlib.import_module(tool)
    except ModuleNotFoundError:
        continue
    raise SystemExit(f"{tool} is in the image")
print(len(names))
"""


def test_the_image_carries_no_test_tooling() -> None:
    rels = [rel for _, rel in image_files.product_files()]
    assert not [r for r in rels if r.startswith(("nodeos/devtools/", "nodeos/lab/"))]
    assert "nodeos/daemon/main.py" in rels and "nodeos/__init__.py" in rels
    for target in SCRIPTS.values():  # every command the image installs has its module
        module = target.split(":")[0]
        assert f"{module.replace('.', '/')}.py" in rels, module
    assert not [r for r in rels if "__pycache__" in r or r.endswith(".pyc")]


def test_what_the_image_carries_imports_without_the_tooling(tmp_path: Path) -> None:
    site = tmp_path / "dist-packages"
    for path, rel in image_files.product_files():  # as _add_nodeos_layer copies them
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, site / rel)
    # -S: no site module, hence none of the dev install's path hooks (its editable finder would
    # find nodeos/devtools in the checkout); the dependencies' directory only, as in the image.
    deps = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    setup = f"import sys; sys.path[:0] = [{str(site)!r}, *{deps!r}]"
    out = subprocess.run(
        [sys.executable, "-S", "-c", f"{setup}\n{_IMPORT_ALL}", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 150  # every product module, imported
