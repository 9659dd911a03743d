"""Update bundles the update tests install: each built, with the real `nodeos-lab image --bundle`,
from a copy of this work tree that differs on purpose (a bumped version; a daemon that cannot
start). Built images and bundles are cached under the image cache like any other (their keys are
their files), so a second run reuses them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
# A daemon that cannot start: its entry module fails at import, as a broken build would.
BROKEN_DAEMON = 'raise ImportError("nodeos test bundle: broken on purpose, nodeosd cannot start")\n'


def bump(version: str) -> str:
    """0.4.0 -> 0.4.1 (the last number up by one)."""
    head, _, last = version.rpartition(".")
    return f"{head}.{int(last) + 1}" if head else str(int(last) + 1)


def tree_copy(dest: Path) -> Path:
    """The work tree's files (tracked and untracked, not ignored: no .venv) copied to dest."""
    files = subprocess.run(
        ["git", "-C", str(PROJECT), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    shutil.rmtree(dest, ignore_errors=True)
    for rel in filter(None, files):
        src = PROJECT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def set_version(tree: Path, version: str) -> None:
    for rel, key in (("pyproject.toml", "version"), ("nodeos/__init__.py", "__version__")):
        p = tree / rel
        text, n = re.subn(rf'^{key} = "[^"]+"', f'{key} = "{version}"', p.read_text(), count=1, flags=re.M)
        assert n == 1, f"no version in {p}"
        p.write_text(text)


def bundle_of(tree: Path) -> Path:
    """`nodeos-lab image --bundle` run from `tree` (its own nodeos package); the bundle's path."""
    path = os.pathsep.join([str(tree), str(tree / "tests" / "tooling")])  # its own nodeos and tooling
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        ["nice", "-n", "10", sys.executable, "-c", "from nodeos_devtools.lab.cli import main; main()",
         "image", "--bundle"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"bundle build failed in {tree}:\n{proc.stderr[-3000:]}"
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_file() and str(path).endswith(".raucb"), proc.stdout
    return path


def make_bundle(work: Path, version: str, *, broken: bool = False) -> Path:
    tree = tree_copy(work / ("broken" if broken else "bumped"))
    set_version(tree, version)
    if broken:
        main = tree / "nodeos" / "daemon" / "main.py"
        text = main.read_text()
        at = text.index("from __future__ import annotations\n") + len("from __future__ import annotations\n")
        main.write_text(text[:at] + BROKEN_DAEMON + text[at:])
    return bundle_of(tree)


if __name__ == "__main__":  # build them ahead: python tests/lab/update_helpers.py DIR VERSION [broken]
    print(make_bundle(Path(sys.argv[1]), sys.argv[2], broken=sys.argv[3:] == ["broken"]))
