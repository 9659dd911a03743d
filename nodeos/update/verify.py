"""Verify an update bundle on the node before anything is written (`nodeos node update`).

Order, cheapest and least trusting first: the file's layout (pure, nodeos/update/checks.py),
then RAUC's own verification of the signature over the whole image against the node's keyring
(`rauc info --keyring`: every byte of the image is hashed), then the signed manifest's
architecture and version. Any refusal is a BundleRefused naming the reason; nothing here writes.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from nodeos.errors import EnvironmentProblem
from nodeos.update import checks
from nodeos.update.checks import BundleRefused, Verdict

DEFAULT_KEYRING = "/etc/rauc/keyring.pem"
RAUC_TIMEOUT_S = 600.0  # hashing a few GB on a slow disk


def node_arch() -> str:
    return checks.debian_arch(platform.machine())


def read_layout(path: Path) -> checks.Layout:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(checks.HEAD_BYTES)
            f.seek(max(size - checks.TRAILER_BYTES, 0))
            tail = f.read(checks.TRAILER_BYTES)
            lay = checks.layout(size, head, tail)
            f.seek(lay.payload_end)
            checks.check_signature_header(lay, f.read(8))
    except IsADirectoryError:
        raise BundleRefused("unreadable", f"{path} is a directory") from None
    except FileNotFoundError:
        raise BundleRefused("unreadable", f"{path} does not exist") from None
    except PermissionError:
        raise BundleRefused("unreadable", f"{path}: permission denied") from None
    return lay


def rauc_info(path: Path, keyring: Path) -> dict[str, Any]:
    """RAUC's verification (signature, chain to the keyring, hash of the whole image) and the
    signed manifest. Never called without a keyring: `rauc info` without one skips the check."""
    rauc = shutil.which("rauc")
    if rauc is None:
        raise EnvironmentProblem("rauc is not installed: bundles cannot be verified on this machine")
    if not keyring.is_file():
        raise BundleRefused(
            "no_keyring", f"{keyring} does not exist (the certificates bundles must be signed with)"
        )
    try:
        proc = subprocess.run(
            [rauc, f"--keyring={keyring}", "--output-format=json", "info", str(path)],
            capture_output=True,
            text=True,
            timeout=RAUC_TIMEOUT_S,
            check=False,
            # English messages: the reason is told from them (checks.classify_rauc_error)
            env={**os.environ, "LC_ALL": "C"},
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"rauc info did not finish in {RAUC_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        raise checks.classify_rauc_error(proc.stderr + proc.stdout)
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        raise BundleRefused("unreadable", f"rauc info printed no manifest: {proc.stdout[:200]!r}") from None
    if not isinstance(info, dict):
        raise BundleRefused("unreadable", "rauc info printed no manifest")
    return info


def verify(
    path: str | Path,
    *,
    keyring: str | Path = DEFAULT_KEYRING,
    running: str | None = None,
    arch: str | None = None,
    allow_downgrade: bool = False,
) -> tuple[Verdict, dict[str, Any]]:
    """The verdict on bundle `path` (and RAUC's manifest), or BundleRefused naming why not."""
    import nodeos

    p = Path(path)
    lay = read_layout(p)
    info = rauc_info(p, Path(keyring))
    verdict = checks.check_manifest(
        info, arch=arch or node_arch(), running=running or nodeos.__version__, allow_downgrade=allow_downgrade
    )
    return verdict, {"size": lay.size, "images": info.get("images") or []}
