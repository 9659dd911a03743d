"""nodeos-tgt (native/nodeos-tgt): SPDK's NVMe-oF target with its RPC socket answered every
--rpc-poll-us instead of every 4 ms, built against an operator's local SPDK build.

Used by the SPDK test tier (tests/spdk/conftest.py: the target the tests run) and by the image
build (image_spdk: the target the image carries). Nothing of SPDK is in the project: `make`
runs SPDK's own build files from the tree the build was made in.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nodeos.errors import EnvironmentProblem, OperationFailed

SOURCE = Path(__file__).resolve().parents[3] / "native" / "nodeos-tgt"
NAME = "nodeos-tgt"
BUILD_TIMEOUT_S = 600


def spdk_tree(nvmf_tgt: Path) -> Path | None:
    """The SPDK source tree a build's nvmf_tgt was made in (build/bin/nvmf_tgt, links resolved),
    or None when the directory is an install without its tree (no mk/spdk.common.mk)."""
    target = nvmf_tgt.resolve()
    if len(target.parents) < 3:
        return None
    tree = target.parents[2]
    return tree if (tree / "mk" / "spdk.common.mk").is_file() and (tree / "build" / "lib").is_dir() else None


def build(tree: Path) -> Path:
    """`make` native/nodeos-tgt against `tree` (a no-op when up to date); the binary's path."""
    if not (SOURCE / "Makefile").is_file():
        raise EnvironmentProblem(f"{SOURCE} is missing: the nodeos-tgt source is part of the project")
    argv = ["make", "-s", "-C", str(SOURCE), f"SPDK_ROOT_DIR={tree}"]
    env = {**os.environ, "MAKEFLAGS": ""}  # an outer make's flags (-j, targets) are not ours
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env, check=False
        )
    except FileNotFoundError as e:
        raise EnvironmentProblem("make is not installed (apt-get install build-essential)") from e
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip()[-2000:]
        raise OperationFailed(f"building {NAME} against {tree} failed ({proc.returncode}):\n{out}")
    binary = SOURCE / NAME
    if not binary.is_file():
        raise OperationFailed(f"make -C {SOURCE} succeeded but left no {NAME}")
    return binary
