"""A Plan as the files that make it so: pure (paths relative to the root, contents, modes).

systemd-networkd `.network` files (one per interface: MTU, addresses, routes), the host name,
root's authorized_keys (0600 in a 0700 directory) with an sshd drop-in that allows keys only,
timesyncd's NTP servers, and nodeosd's own settings (node name, storage addresses, peers,
metrics on the management address) merged into /etc/nodeos/nodeosd.toml over what is there.
Labels and the cluster action are not files: they go through nodeosd (nodeos.provision.apply).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from nodeos.errors import OperationFailed
from nodeos.provision.model import METRICS_PORT, Interface, Plan

HEADER = "# written by `nodeos provision` from {source}; a new configuration rewrites it\n"
NETWORK_DIR = "etc/systemd/network"
NETWORK_PREFIX = "50-nodeos-"
HOSTNAME = "etc/hostname"
AUTHORIZED_KEYS = "root/.ssh/authorized_keys"
SSHD_DROPIN = "etc/ssh/sshd_config.d/50-nodeos.conf"
TIMESYNCD_DROPIN = "etc/systemd/timesyncd.conf.d/50-nodeos.conf"
NODEOSD_TOML = "etc/nodeos/nodeosd.toml"
# nodeosd.toml keys a plan may set; every other key of the file is kept as it was.
NODEOSD_KEYS = ("node_name", "storage_address", "peer_listen", "metrics_listen")


@dataclass(frozen=True)
class FileSpec:
    content: str
    mode: int = 0o644
    dir_mode: int = 0o755  # of the directories created for it


def network_file(iface: Interface, source: str) -> str:
    lines = [HEADER.format(source=source).rstrip("\n"), "[Match]", f"Name={iface.name}", ""]
    link = []
    if iface.mtu is not None:
        link.append(f"MTUBytes={iface.mtu}")
    if not iface.up:
        link.append("ActivationPolicy=down")
    if link:
        lines += ["[Link]", *link, ""]
    lines += ["[Network]", "LinkLocalAddressing=no" if iface.addresses else "LinkLocalAddressing=ipv6"]
    lines += [f"Address={a}" for a in iface.addresses]
    lines.append("")
    for r in iface.routes:
        lines += ["[Route]", f"Destination={r.dst}"]
        if r.gateway:
            lines.append(f"Gateway={r.gateway}")
        if r.metric is not None:
            lines.append(f"Metric={r.metric}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise OperationFailed(f"nodeosd.toml holds a value provisioning cannot rewrite: {v!r}", field="config")


def nodeosd_settings(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if plan.hostname:
        out["node_name"] = plan.hostname
    if plan.storage_addresses:
        out["storage_address"] = list(plan.storage_addresses)
    if plan.peer_listen:
        out["peer_listen"] = plan.peer_listen
    if plan.management_address:
        m = plan.management_address
        out["metrics_listen"] = f"[{m}]:{METRICS_PORT}" if ":" in m else f"{m}:{METRICS_PORT}"
    return out


def nodeosd_toml(plan: Plan, existing: str | None, source: str) -> str | None:
    """nodeosd.toml with the plan's settings over the file's others; None: nothing to set."""
    ours = nodeosd_settings(plan)
    if not ours:
        return None
    try:
        kept = tomllib.loads(existing or "")
    except tomllib.TOMLDecodeError as exc:
        raise OperationFailed(
            f"/etc/nodeos/nodeosd.toml is not valid TOML, provisioning will not rewrite it: {exc}",
            field="config",
        ) from None
    lines = [HEADER.format(source=source).rstrip("\n") + " (its keys: " + ", ".join(sorted(ours)) + ")"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in sorted(ours.items())]
    others = {k: v for k, v in kept.items() if k not in ours}
    if others:
        lines += ["", "# kept from the file as it was"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in sorted(others.items())]
    return "\n".join(lines) + "\n"


def render(plan: Plan, source: str, existing_nodeosd: str | None) -> dict[str, FileSpec]:
    """Path (relative to the root) -> what it must hold. A Plan's empty part writes nothing."""
    files: dict[str, FileSpec] = {}
    for iface in plan.interfaces:
        files[f"{NETWORK_DIR}/{NETWORK_PREFIX}{iface.name}.network"] = FileSpec(network_file(iface, source))
    if plan.hostname:
        files[HOSTNAME] = FileSpec(plan.hostname + "\n")
    if plan.ssh_keys:
        files[AUTHORIZED_KEYS] = FileSpec(
            HEADER.format(source=source) + "\n".join(plan.ssh_keys) + "\n", mode=0o600, dir_mode=0o700
        )
        files[SSHD_DROPIN] = FileSpec(
            HEADER.format(source=source)
            + "# keys only: no passwords, root by key\n"
            + "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            + "PermitRootLogin prohibit-password\n"
        )
    if plan.ntp:
        files[TIMESYNCD_DROPIN] = FileSpec(
            HEADER.format(source=source) + "[Time]\nNTP=" + " ".join(plan.ntp) + "\n"
        )
    toml = nodeosd_toml(plan, existing_nodeosd, source)
    if toml is not None:
        files[NODEOSD_TOML] = FileSpec(toml)
    return files
