"""The pure checks of an update bundle, and the names of the reasons a bundle is refused.

A bundle is RAUC's `plain` format: a squashfs image (padded to 4 KiB), then a detached CMS
signature over that image, then the signature's length as 8 big-endian bytes. RAUC verifies the
signature and its chain to the node's keyring (`rauc info --keyring`, nodeos/update/verify.py);
what it does not check before an install, and what these functions do:

- the layout: a file cut short (a copy that stopped, a full disk) is named "truncated" rather
  than surfacing as RAUC's "signature size exceeds bundle size" or as a bad signature;
- the architecture, from the signed manifest's `compatible` (`nodeos-<debian arch>`);
- a downgrade: a bundle older than the running release is refused unless asked for.

The manifest's fields are trusted only after RAUC verified its signature (the order in verify.py).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from nodeos.errors import BadInput, EnvironmentProblem, NodeosError

SQUASHFS_MAGIC = b"hsqs"
HEAD_BYTES = 96  # the squashfs superblock
TRAILER_BYTES = 8
COMPATIBLE_PREFIX = "nodeos-"

# reason -> what the operator reads first; every refusal names one of these.
REASONS: dict[str, str] = {
    "unreadable": "the bundle cannot be read",
    "not_a_bundle": "not an update bundle",
    "truncated": "the bundle is truncated",
    "bad_signature": "bad signature",
    "no_keyring": "no keyring to check signatures with",
    "other_architecture": "the bundle is for another architecture",
    "bad_version": "the bundle's version cannot be read",
    "downgrade": "downgrade refused",
}


class BundleRefused(BadInput):
    """A bundle that must not be installed; nothing was written. `reason` is a key of REASONS."""

    code = "bundle_refused"

    def __init__(self, reason: str, detail: str, *, allowed: Any = None) -> None:
        assert reason in REASONS, reason
        super().__init__(f"{REASONS[reason]}: {detail}", field="bundle", allowed=allowed)
        self.reason = reason

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "reason": self.reason}


@dataclass(frozen=True)
class Layout:
    size: int  # the file's length
    image_bytes: int  # the squashfs image's own length (its superblock's bytes_used)
    payload_end: int  # where the signature starts (the image plus its padding)
    signature_bytes: int


def layout(size: int, head: bytes, tail: bytes) -> Layout:
    """The bundle's parts from its first HEAD_BYTES and last TRAILER_BYTES; BundleRefused when the
    file cannot be a whole bundle."""
    if size < HEAD_BYTES + TRAILER_BYTES or head[:4] != SQUASHFS_MAGIC:
        raise BundleRefused(
            "not_a_bundle",
            f"{size} bytes without a squashfs image at its start "
            "(a RAUC bundle as `nodeos-lab image --bundle` makes)",
        )
    (image_bytes,) = struct.unpack_from("<Q", head, 40)
    (sig_bytes,) = struct.unpack(">Q", tail[-TRAILER_BYTES:])
    payload_end = size - TRAILER_BYTES - sig_bytes
    if sig_bytes == 0 or sig_bytes > size or payload_end < image_bytes:
        raise BundleRefused(
            "truncated",
            f"{size} bytes, but its image alone has {image_bytes} and its trailer does not describe "
            "a signature after it (cut short while copied?)",
        )
    return Layout(size, image_bytes, payload_end, sig_bytes)


def check_signature_header(lay: Layout, sig_head: bytes) -> None:
    """The signature is one DER SEQUENCE filling exactly the space the trailer gives it: a file
    cut inside its signature leaves a trailer of signature bytes, which rarely passes `layout`,
    and never this."""
    if der_length(sig_head) != lay.signature_bytes:
        raise BundleRefused(
            "truncated",
            f"{lay.size} bytes: the signature at byte {lay.payload_end} is not the "
            f"{lay.signature_bytes} bytes the trailer announces (cut short while copied?)",
        )


def der_length(b: bytes) -> int | None:
    """The whole length (header included) of the DER SEQUENCE starting `b`; None if it is none."""
    if len(b) < 2 or b[0] != 0x30:
        return None
    first = b[1]
    if first < 0x80:
        return 2 + first
    n = first & 0x7F
    if n == 0 or n > 4 or len(b) < 2 + n:
        return None
    return 2 + n + int.from_bytes(b[2 : 2 + n], "big")


# --- the signed manifest ------------------------------------------------------------------

MACHINE_TO_DEBIAN = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "riscv64": "riscv64"}


def debian_arch(machine: str) -> str:
    """Debian's name of a kernel machine name (`uname -m`): the names bundles carry."""
    return MACHINE_TO_DEBIAN.get(machine, machine)


def compatible_for(arch: str) -> str:
    return f"{COMPATIBLE_PREFIX}{arch}"


_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.dev(\d+))?(?:\+[A-Za-z0-9.]+)?$")
_PRE_ORDER = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4}


def version_key(v: str) -> tuple[Any, ...]:
    """An order for nodeos's versions (PEP 440's common forms: 0.5.0, 0.5.0rc1, 0.5.0.dev3;
    a +local part does not count). ValueError for anything else."""
    m = _VERSION.match(v.strip())
    if not m:
        raise ValueError(v)
    release = [int(x) for x in m.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:  # 0.5 == 0.5.0
        release.pop()
    pre, pre_n, dev = m.group(2), m.group(3), m.group(4)
    if pre is None and dev is not None:
        stage = (_PRE_ORDER["dev"], int(dev), 0)
    else:
        stage = (_PRE_ORDER[pre], int(pre_n or 0), 1 if dev is None else 0)
    return (tuple(release), stage, int(dev or 0) if pre is not None else 0)


@dataclass(frozen=True)
class Verdict:
    version: str
    running: str
    arch: str
    build: str | None
    change: str  # upgrade, same, downgrade (allowed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "running": self.running,
            "arch": self.arch,
            "build": self.build,
            "change": self.change,
        }


def check_manifest(info: dict[str, Any], *, arch: str, running: str, allow_downgrade: bool) -> Verdict:
    """Architecture and version of a bundle whose signature RAUC has verified (`rauc info`'s JSON)."""
    compatible = str(info.get("compatible") or "")
    if compatible != compatible_for(arch):
        theirs = (
            compatible.removeprefix(COMPATIBLE_PREFIX) if compatible.startswith(COMPATIBLE_PREFIX) else None
        )
        what = f"it is for {theirs}" if theirs else f"its compatible is {compatible!r}, not a nodeos one"
        raise BundleRefused(
            "other_architecture", f"{what}; this node is {arch}", allowed=compatible_for(arch)
        )
    version = str(info.get("version") or "")
    try:
        new, cur = version_key(version), version_key(running)
    except ValueError:
        raise BundleRefused("bad_version", f"version {version!r} (running {running!r})") from None
    change = "upgrade" if new > cur else "same" if new == cur else "downgrade"
    if change == "downgrade" and not allow_downgrade:
        raise BundleRefused(
            "downgrade",
            f"the bundle has {version}, this node runs {running}; "
            "give --allow-downgrade to install an older release",
            allowed="--allow-downgrade",
        )
    build = info.get("build")
    return Verdict(version, running, arch, str(build) if build is not None else None, change)


def classify_rauc_error(text: str) -> NodeosError:
    """`rauc info`'s complaint as a refusal naming the reason (its own words kept as detail), or
    an EnvironmentProblem when RAUC could not run its own tools (rauc 1.13 reads a plain
    bundle's manifest with `unsquashfs`): that says nothing about the bundle."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "rauc-Message" not in ln]
    detail = "; ".join(lines[-3:]) or "rauc info failed without a message"
    low = text.lower()
    if "failed to execute child process" in low or "failed to run" in low:
        return EnvironmentProblem(f"rauc cannot read bundles on this machine: {detail}")
    if "signature size" in low and "exceeds" in low:
        return BundleRefused("truncated", detail)
    if "signature" in low or "verif" in low or "certificate" in low or "cms" in low:
        return BundleRefused("bad_signature", detail)
    if "invalid bundle format" in low or "squashfs" in low:
        return BundleRefused("not_a_bundle", detail)
    return BundleRefused("unreadable", detail)
