"""The soak's lookup of a volume's multipath head on the GPU node
(tests/tooling/nodeos_devtools/lab/soak_io.py
`device_script`), run by a real shell over a made-up /sys and /dev: nothing while the volume's
subsystem has no head yet (the unguarded loop answered another volume's head, where fio ran:
two soaks' marks went there), the head once it is there, never a /dev node whose device number
is not the kernel's for that name."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nodeos_devtools.lab.soak_io import device_script

WANT = "nqn.2014-08.io.nodeos:vol:want"
OTHER = "nqn.2014-08.io.nodeos:vol:other"


def _subsys(root: Path, n: int, nqn: str, entries: list[str]) -> None:
    d = root / "sys/class/nvme-subsystem" / f"nvme-subsys{n}"
    d.mkdir(parents=True)
    (d / "subsysnqn").write_text(nqn + "\n")
    for e in entries:
        (d / e).mkdir()


def _head(root: Path, name: str, minor: int, node_minor: int | None = None) -> None:
    (root / "sys/block" / name).mkdir(parents=True)
    (root / "sys/block" / name / "dev").write_text(f"259:{minor}\n")
    (root / "dev").mkdir(exist_ok=True)
    os.mknod(
        root / "dev" / name, 0o600 | 0o060000, os.makedev(259, minor if node_minor is None else node_minor)
    )


def _run(root: Path) -> str:
    r = subprocess.run(
        ["sh", "-c", device_script(WANT, str(root))], capture_output=True, text=True, timeout=60
    )
    return r.stdout.strip() if r.returncode == 0 else ""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    try:
        os.mknod(tmp_path / "probe", 0o600 | 0o060000, os.makedev(259, 99))
    except OSError as e:
        pytest.skip(f"cannot make device nodes here ({e}): the test needs root")
    return tmp_path


def test_no_head_yet_is_nothing_not_another_volumes_head(root: Path) -> None:
    _subsys(root, 0, OTHER, ["nvme0", "nvme0n1"])  # the volume fio runs on
    _head(root, "nvme0n1", 0)
    _subsys(root, 2, WANT, ["nvme2", "nvme3"])  # connected, namespace not scanned yet
    assert _run(root) == ""
    (root / "sys/class/nvme-subsystem/nvme-subsys2/nvme2n1").mkdir()
    _head(root, "nvme2n1", 1)
    assert _run(root) == f"{root}/dev/nvme2n1"


def test_a_dev_node_of_another_device_number_is_not_taken(root: Path) -> None:
    _subsys(root, 2, WANT, ["nvme2", "nvme2n1"])
    _head(root, "nvme2n1", 1, node_minor=7)  # udev has not replaced the node yet
    assert _run(root) == ""
