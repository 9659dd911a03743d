"""Build a signed update bundle (RAUC `plain` format) and the lab's own signing key.

The bundle holds the slot's root file system image (`rootfs.ext4`, the image RAUC writes to the
other root slot), the kernel and initramfs of that slot (also inside the root's /boot; here for
the ESP), and `nodeos-build.json` (build metadata). The whole squashfs is signed, so every file
in it is covered by the signature, not only the manifest's images.

Keys are files: the operator's key and certificate are named by path (`--key`, `--cert`), never
passed as content on a command line. The lab's test key is made on first use under the cache
directory (0700, key 0600) and never leaves it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nodeos.errors import BadInput, EnvironmentProblem, OperationFailed
from nodeos.update import checks

LAB_KEY_DIR = "update-key"
LAB_SUBJECT = "/O=nodeos lab/CN=nodeos lab update signing (test key, not for production)"
# zstd: several times faster than RAUC's default gzip on the root image, similar size.
MKSQUASHFS_ARGS = "-comp zstd -Xcompression-level 6"


@dataclass(frozen=True)
class SigningKey:
    key: Path
    cert: Path
    lab: bool  # the lab's own test key


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise EnvironmentProblem(f"{tool} is not installed (run images/bootstrap.sh)")
    return path


def lab_key(cache: Path) -> SigningKey:
    """The lab's signing key and self-signed certificate, made once (openssl) and kept."""
    d = cache / LAB_KEY_DIR
    key, cert = d / "lab.key.pem", d / "lab.cert.pem"
    if key.is_file() and cert.is_file():
        return SigningKey(key, cert, lab=True)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    tmp_key, tmp_cert = d / ".lab.key.pem.tmp", d / ".lab.cert.pem.tmp"
    # the key file is created 0600 before openssl writes into it (its own umask may be wider)
    os.close(os.open(tmp_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    proc = subprocess.run(
        [
            _need("openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(tmp_key), "-out", str(tmp_cert), "-days", "3650", "-subj", LAB_SUBJECT,
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise OperationFailed(f"openssl could not make the lab's signing key: {proc.stderr.strip()}")
    os.replace(tmp_cert, cert)
    os.replace(tmp_key, key)
    return SigningKey(key, cert, lab=True)


def operator_key(key: str | None, cert: str | None) -> SigningKey | None:
    """The operator's key and certificate files (both or neither), checked readable."""
    if key is None and cert is None:
        return None
    if key is None or cert is None:
        raise BadInput("give both --key and --cert (files), or neither for the lab's test key", field="key")
    for name, p in (("key", key), ("cert", cert)):
        if not Path(p).is_file() or not os.access(p, os.R_OK):
            raise BadInput(f"--{name} {p} is not a readable file", field=name, allowed="a PEM file")
    return SigningKey(Path(key).resolve(), Path(cert).resolve(), lab=False)


def manifest(*, version: str, arch: str, build: str, rootfs_name: str = "rootfs.ext4") -> str:
    # format=plain: RAUC checks the signature over the whole image before it installs a byte
    # (verity bundles are checked block by block while they are written).
    return (
        "[update]\n"
        f"compatible={checks.compatible_for(arch)}\n"
        f"version={version}\n"
        f"build={build}\n"
        "description=nodeos appliance root file system\n\n"
        "[bundle]\nformat=plain\n\n"
        f"[image.rootfs]\nfilename={rootfs_name}\n"
    )


def make_bundle(
    files: Mapping[str, Path],
    out: Path,
    *,
    version: str,
    arch: str,
    build: str,
    metadata: Mapping[str, object],
    signing: SigningKey,
    progress: Callable[[str], None] = lambda _m: None,
) -> Path:
    """Bundle `files` (name in the bundle -> file; `rootfs.ext4` required) into `out`, signed."""
    rauc = _need("rauc")
    _need("mksquashfs")
    if "rootfs.ext4" not in files:
        raise OperationFailed("a bundle needs rootfs.ext4")
    checks.version_key(version)  # a version a node can compare, or ValueError
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".bundle-") as tmp:
        content = Path(tmp) / "content"
        content.mkdir()
        for name, src in files.items():
            try:  # a hard link costs nothing; another file system gets a copy
                os.link(src, content / name)
            except OSError:
                shutil.copyfile(src, content / name)
        (content / "manifest.raucm").write_text(manifest(version=version, arch=arch, build=build))
        meta = {**metadata, "version": version, "arch": arch, "build": build}
        (content / "nodeos-build.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        partial = Path(tmp) / "bundle.raucb"
        progress(
            f"signing and packing the bundle with rauc ({'lab test key' if signing.lab else signing.cert})"
        )
        proc = subprocess.run(
            [
                rauc, "bundle", f"--cert={signing.cert}", f"--key={signing.key}",
                f"--mksquashfs-args={MKSQUASHFS_ARGS}", str(content), str(partial),
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise OperationFailed(f"rauc bundle failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")
        os.replace(partial, out)  # whole or not at all: a reader never sees a half-written bundle
    return out
