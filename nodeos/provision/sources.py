"""Where a node's configuration comes from, in order: a systemd credential, a labelled config
partition (or USB stick), the kernel command line. The first source present is the
configuration, whole; the others are not merged in (they are reported as ignored).

Reading a directory, a file or a command line is pure enough to test on real files; finding and
mounting the partition is the edge (`mounted_partition`), kept apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeos.errors import BadInput

CREDENTIAL = "nodeos.provision"  # systemd credential (SMBIOS type 11, QEMU fw_cfg, LoadCredential)
TOKEN_CREDENTIAL = "nodeos.join-token"  # the usual name of the join token's credential
PARTITION_LABEL = "NODEOS-CFG"  # file system label of the config partition or USB stick
PARTITION_FILE = "nodeos.toml"
SYSTEM_CREDENTIALS = "/run/credentials/@system"

# Kernel command line keys (docs/provisioning.md): each maps onto the document's own fields.
CMDLINE_KEYS = (
    "nodeos.hostname",
    "nodeos.address",  # IFACE:ADDR/PREFIX, repeatable
    "nodeos.mtu",  # IFACE:MTU
    "nodeos.route",  # IFACE:DST[,GATEWAY[,METRIC]], repeatable
    "nodeos.management",  # ADDR
    "nodeos.storage",  # ADDR[,ADDR...]
    "nodeos.peer_port",
    "nodeos.ntp",  # SERVER[,SERVER...]
    "nodeos.ssh_key",  # "TYPE BASE64 [COMMENT]" (quoted), repeatable
    "nodeos.label",  # KEY=VALUE, repeatable
    "nodeos.cluster",  # init | join
    "nodeos.cluster_address",  # HOST:PORT (join)
    "nodeos.token_credential",  # NAME (join)
    "nodeos.token_file",  # PATH (join)
)
# `nodeos.*` words that are not provisioning (the lab's own hooks, nodeos-lab-init.sh).
CMDLINE_OTHER = ("nodeos.lab", "nodeos.role", "nodeos.ip", "nodeos.hostid", "nodeos.hostnqn", "nodeos.peer")
SOURCE_LABELS = {
    "credential": f"the systemd credential {CREDENTIAL}",
    "partition": f"the config partition LABEL={PARTITION_LABEL}",
    "cmdline": "the kernel command line",
}


@dataclass(frozen=True)
class Found:
    """One source's configuration, read but not yet checked."""

    source: str  # "credential", "partition" or "cmdline"
    where: str  # what an operator can look at: the file, the device, /proc/cmdline
    text: str  # the configuration as it came (for the digest; never a token)
    doc: dict[str, Any] | None  # decoded; None when `error` says why it could not be
    base: str  # directory a relative token_file is read from
    error: BadInput | None = None

    @property
    def label(self) -> str:
        """The source in words that stay the same from boot to boot (the files' headers)."""
        return SOURCE_LABELS[self.source]

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.source}\0{self.text}".encode()).hexdigest()


def _toml(source: str, where: str, text: str, base: str) -> Found:
    try:
        return Found(source, where, text, tomllib.loads(text), base)
    except tomllib.TOMLDecodeError as exc:
        err = BadInput(f"{where} is not valid TOML: {exc}", field="config", allowed="a TOML document")
        return Found(source, where, text, None, base, err)


def _found_file(source: str, path: Path) -> Found | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        err = BadInput(f"{path} cannot be read: {exc}", field="config", allowed="a readable UTF-8 file")
        return Found(source, str(path), "", None, str(path.parent), err)
    return _toml(source, str(path), text, str(path.parent))


def from_credentials(directory: str | Path | None) -> Found | None:
    """The `nodeos.provision` credential in a credentials directory ($CREDENTIALS_DIRECTORY)."""
    if not directory:
        return None
    return _found_file("credential", Path(directory) / CREDENTIAL)


def credentials_dir(env: Mapping[str, str] | None = None) -> str:
    """The unit's credentials (ImportCredential=), else the system's (SMBIOS, fw_cfg)."""
    return (os.environ if env is None else env).get("CREDENTIALS_DIRECTORY") or SYSTEM_CREDENTIALS


def from_partition(mounted: str | Path | None) -> Found | None:
    """`nodeos.toml` at the top of a mounted config partition."""
    if not mounted:
        return None
    return _found_file("partition", Path(mounted) / PARTITION_FILE)


def _split_cmdline(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def cmdline_words(text: str) -> list[tuple[str, str]]:
    """The provisioning words (key, value) of a kernel command line, in order."""
    out = []
    for w in _split_cmdline(text):
        key, _eq, value = w.partition("=")
        if key.startswith("nodeos.") and key not in CMDLINE_OTHER:
            out.append((key, value))
    return out


def _num(value: str) -> int | str:
    # ASCII digits only: str.isdigit() is also true for '²', which int() refuses (found by the fuzz test)
    return int(value) if value.isascii() and value.isdigit() else value


def cmdline_doc(words: list[tuple[str, str]]) -> dict[str, Any]:
    """The document a command line's words say (pure): the same parser checks it afterwards,
    so a bad value is refused naming the document's field (docs/provisioning.md maps them)."""
    doc: dict[str, Any] = {}
    ifaces: dict[str, dict[str, Any]] = {}

    def iface(spec: str, key: str) -> tuple[dict[str, Any], str]:
        name, sep, rest = spec.partition(":")
        if not sep or not name:
            raise BadInput(
                f"{key}={spec!r} is not IFACE:VALUE", field=key, allowed="IFACE:VALUE, e.g. eth0:..."
            )
        return ifaces.setdefault(name, {"name": name}), rest

    cluster: dict[str, Any] = {}
    for key, value in words:
        if key not in CMDLINE_KEYS:
            raise BadInput(
                f"{key} is not a provisioning key of the kernel command line",
                field=key,
                allowed=list(CMDLINE_KEYS),
            )
        if key == "nodeos.hostname":
            doc["hostname"] = value
        elif key == "nodeos.address":
            t, rest = iface(value, key)
            t.setdefault("addresses", []).append(rest)
        elif key == "nodeos.mtu":
            t, rest = iface(value, key)
            t["mtu"] = _num(rest)
        elif key == "nodeos.route":
            t, rest = iface(value, key)
            parts = rest.split(",")
            route: dict[str, Any] = {"dst": parts[0]}
            if len(parts) > 1 and parts[1]:
                route["gateway"] = parts[1]
            if len(parts) > 2:
                route["metric"] = _num(parts[2])
            t.setdefault("routes", []).append(route)
        elif key == "nodeos.management":
            doc["management_address"] = value
        elif key == "nodeos.storage":
            doc["storage_addresses"] = [a for a in value.split(",") if a]
        elif key == "nodeos.peer_port":
            doc["peer_port"] = _num(value)
        elif key == "nodeos.ntp":
            doc["ntp"] = [s for s in value.split(",") if s]
        elif key == "nodeos.ssh_key":
            doc.setdefault("ssh", {}).setdefault("authorized_keys", []).append(value)
        elif key == "nodeos.label":
            k, _eq, v = value.partition("=")
            doc.setdefault("labels", {})[k] = v
        elif key == "nodeos.cluster":
            cluster["action"] = value
        else:
            cluster[key.removeprefix("nodeos.").replace("cluster_", "")] = value
    if ifaces:
        doc["network"] = {"interfaces": list(ifaces.values())}
    if cluster:
        doc["cluster"] = cluster
    return doc


def from_cmdline(text: str | None) -> Found | None:
    if not text:
        return None
    words = cmdline_words(text)
    if not words:
        return None
    shown = " ".join(f"{k}={v}" for k, v in words)
    try:
        doc = cmdline_doc(words)
    except BadInput as err:
        return Found("cmdline", "/proc/cmdline", shown, None, "/", err)
    return Found("cmdline", "/proc/cmdline", shown, doc, "/")


def choose(found: list[Found | None]) -> tuple[Found | None, list[Found]]:
    """The configuration (the first source present) and the sources it overrides."""
    present = [f for f in found if f is not None]
    return (present[0] if present else None), present[1:]


# --- the edge: the labelled partition -----------------------------------------------------


def partition_device(label: str = PARTITION_LABEL, by_label: str = "/dev/disk/by-label") -> str | None:
    p = Path(by_label) / label
    return str(p.resolve()) if p.exists() else None


@contextlib.contextmanager
def mounted_partition(device: str | None, mnt: str = "/run/nodeos-provision/cfg") -> Iterator[Found | None]:
    """The config partition's configuration, read while it is mounted read-only at one fixed,
    root-only place (unmounted after); None without a partition. A partition that does not mount
    is a configuration that cannot be read: a Found with its error, recorded like any other."""
    if device is None:
        yield None
        return
    os.makedirs(mnt, mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(mnt), 0o700)
    r = subprocess.run(
        ["mount", "-o", "ro,nosuid,nodev,noexec", device, mnt], capture_output=True, text=True, timeout=60
    )
    if r.returncode != 0:
        err = BadInput(
            f"config partition {device} cannot be mounted: {r.stderr.strip()}",
            field="config",
            allowed="a file system Linux mounts (vfat, ext4, iso9660) labelled " + PARTITION_LABEL,
        )
        yield Found("partition", device, "", None, "/", err)
        return
    try:
        found = from_partition(mnt)
        if found is None:
            err = BadInput(
                f"config partition {device} has no {PARTITION_FILE} at its top",
                field="config",
                allowed=f"a file {PARTITION_FILE} at the top of the partition",
            )
            found = Found("partition", device, "", None, "/", err)
        yield found
    finally:
        subprocess.run(["umount", mnt], capture_output=True, timeout=60)
