"""`nodeos-lab image --bundle`: a signed update bundle of the work tree's image.

The version is pyproject.toml's; the build metadata names the commit (and whether the tree had
uncommitted changes), the image and base keys, the kernel and the architecture. Signed with the
operator's key and certificate files (`--key`, `--cert`) or, without them, the lab's test key
(nodeos/update/build.py). The image's keyring (`/etc/rauc/keyring.pem`, what a node verifies
bundles against) is `NODEOS_UPDATE_KEYRING` (a PEM file of the operator's certificates) when
set at image build, else the lab's test certificate.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import tomllib
from pathlib import Path

from nodeos.update import build as ub
from nodeos_devtools.lab.image import PROJECT_DIR, Image, Progress, base_key, cache_root, default_progress
from nodeos_devtools.lab.image_spdk import read_record

KEYRING_PATH = "etc/rauc/keyring.pem"  # inside the image


def project_version() -> str:
    with open(PROJECT_DIR / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def image_arch() -> str:
    """The image is built for the build host's architecture (mmdebstrap's default)."""
    from nodeos.update.verify import node_arch

    return node_arch()


def keyring_source() -> Path:
    env = os.environ.get("NODEOS_UPDATE_KEYRING")
    return Path(env) if env else ub.lab_key(cache_root()).cert


def install_keyring(rootfs: Path) -> None:
    """The certificates this image accepts bundles from."""
    dst = rootfs / KEYRING_PATH
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)  # the staging tree is hard-linked to the base: never write through
    dst.write_bytes(keyring_source().read_bytes())


def _git(*args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(PROJECT_DIR), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def build_bundle(
    img: Image, *, key: str | None = None, cert: str | None = None, progress: Progress = default_progress
) -> Path:
    """The bundle of image `img` (built now unless one signed by the same certificate exists)."""
    signing = ub.operator_key(key, cert) or ub.lab_key(cache_root())
    version, arch = project_version(), image_arch()
    cert_id = hashlib.sha256(signing.cert.read_bytes()).hexdigest()[:8]
    out = img.dir / f"nodeos-{version}-{arch}-{cert_id}.raucb"
    if out.exists():
        return out
    commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    build = f"{commit[:12] or 'unknown'}{'-dirty' if dirty else ''}.{img.key}"
    kv = cache_root() / f"base-{base_key()}" / "kernel-version"
    kernel_version = kv.read_text().strip() if kv.exists() else None
    metadata = {
        "commit": commit or None,
        "dirty": dirty,
        "image_key": img.key,
        "kernel": kernel_version,
        "built_at": round(time.time()),
        "signed_with": "lab test key" if signing.lab else str(signing.cert),
        **read_record(img.dir),  # the data plane it carries: {"dataplane": "kernel"} or spdk's build
    }
    t0 = time.monotonic()
    progress(f"building update bundle {version} ({arch}) of image {img.key}")
    files = {"rootfs.ext4": img.rootfs, "vmlinuz": img.kernel, "initrd.img": img.initrd}
    ub.make_bundle(
        files,
        out,
        version=version,
        arch=arch,
        build=build,
        metadata=metadata,
        signing=signing,
        progress=progress,
    )
    progress(f"bundle ready in {time.monotonic() - t0:.0f} s: {out} ({out.stat().st_size >> 20} MiB)")
    return out
