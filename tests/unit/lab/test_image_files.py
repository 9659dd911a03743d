"""The image's install step (tests/tooling/nodeos_devtools/lab/image_files.py): the appliance carries the
product package, never the test tooling (the package nodeos_devtools), and what it carries imports and
runs without it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import nodeos
from nodeos_devtools.lab import image_files
from nodeos_devtools.lab.image import SCRIPTS

_IMPORT_ALL = """
import importlib, pkgutil, sys
import nodeos
assert nodeos.__file__.startswith(sys.argv[1]), nodeos.__file__
names = [m.name for m in pkgutil.walk_packages(nodeos.__path__, "nodeos.")]
for name in names:
    importlib.import_module(name)
for tool in ("nodeos_devtools", "nodeos.lab", "nodeos.devtools"):  # the tooling, and its old homes
    try:
        importlib.import_module(tool)
    except ModuleNotFoundError:
        continue
    raise SystemExit(f"{tool} is in the image")
print(len(names))
"""


def test_the_image_carries_no_test_tooling() -> None:
    rels = [rel for _, rel in image_files.product_files()]
    assert all(r.startswith("nodeos/") for r in rels)
    old_homes = ("nodeos/lab/", "nodeos/devtools/")
    assert not [r for r in rels if r.startswith(old_homes) or "nodeos_devtools" in r]
    # Every file of the product package, not a selection that could miss one.
    pkg = Path(nodeos.__file__).resolve().parent
    on_disk = {str(p.relative_to(pkg.parent)) for p in pkg.rglob("*.py") if "__pycache__" not in p.parts}
    assert on_disk <= set(rels)
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
    # -I -S: no PYTHONPATH and no site module, hence none of the dev install's path hooks (its
    # editable finder would find nodeos_devtools in tests/tooling/); the dependencies' directory
    # only, as in the image.
    deps = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    setup = f"import sys; sys.path[:0] = [{str(site)!r}, *{deps!r}]"
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"{setup}\n{_IMPORT_ALL}", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 150  # every product module, imported


def test_a_product_tree_holding_the_tooling_is_refused(tmp_path: Path) -> None:
    """The guard is live: a product module that imports the tooling, or the tooling copied into the
    product package, stops the image build instead of going into the image."""
    pkg = tmp_path / "nodeos"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.py").write_text("import json\n")
    assert [rel for _, rel in image_files.product_files(pkg)] == ["nodeos/__init__.py", "nodeos/ok.py"]
    (pkg / "bad.py").write_text("from nodeos_devtools.sim import run_seed\n")
    with pytest.raises(image_files.ToolingInProduct, match=r"bad\.py"):
        image_files.product_files(pkg)
    (pkg / "bad.py").unlink()
    (pkg / "nodeos_devtools").mkdir()
    (pkg / "nodeos_devtools" / "__init__.py").write_text("")
    with pytest.raises(image_files.ToolingInProduct, match="nodeos_devtools"):
        image_files.product_files(pkg)
