"""The lab's private network: one network namespace per lab, a bridge and one tap per VM.

Nothing is routed out of the namespace; the addresses come from 198.18.0.0/15 (the
benchmarking range), one /24 per lab. Uses the `ip` tool: a few calls per lab lifetime.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from nodeos.errors import EnvironmentProblem, OperationFailed

BRIDGE = "br0"
NETNS_DIR = Path("/run/netns")


def netns_name(lab: str) -> str:
    return f"nodeos-lab-{lab}"


def tap_name(vm: str) -> str:
    return f"tap-{vm}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise EnvironmentProblem("the `ip` tool (iproute2) is not installed") from e
    if check and proc.returncode != 0:
        raise OperationFailed(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def exists(ns: str) -> bool:
    return (NETNS_DIR / ns).exists()


def create(ns: str, gateway_cidr: str) -> None:
    """The namespace with lo up and a bridge holding the lab's first address."""
    _ip("netns", "add", ns)
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "link", "add", BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0")
    _ip("-n", ns, "addr", "add", gateway_cidr, "dev", BRIDGE)
    _ip("-n", ns, "link", "set", BRIDGE, "up")


def add_tap(ns: str, tap: str) -> None:
    if _ip("-n", ns, "link", "show", tap, check=False).returncode == 0:
        return
    _ip("-n", ns, "tuntap", "add", "dev", tap, "mode", "tap")
    _ip("-n", ns, "link", "set", tap, "master", BRIDGE)
    _ip("-n", ns, "link", "set", tap, "up")


def set_tap(ns: str, tap: str, up: bool) -> None:
    _ip("-n", ns, "link", "set", tap, "up" if up else "down")


def tap_is_up(ns: str, tap: str) -> bool:
    out = _ip("-n", ns, "-o", "link", "show", tap, check=False).stdout
    head = out.split(">", 1)[0]
    return ",UP" in head or "<UP" in head


def taps(ns: str) -> list[str]:
    if not exists(ns):
        return []
    out = _ip("-n", ns, "-o", "link", "show", "type", "tun", check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def delete(ns: str) -> None:
    """Removes the namespace; its bridge and taps go with it."""
    if exists(ns):
        for tap in taps(ns):
            _ip("-n", ns, "link", "del", tap, check=False)
        _ip("netns", "del", ns, check=False)
