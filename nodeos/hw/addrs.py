"""The node's IP addresses per network interface, from `ip -j addr show`.

Not pyroute2: nodeosd asks this at every start, and importing pyroute2 alone was measured at
~55 s in a lab VM under TCG on a busy host (one `ip -j addr` call: ~1.3 s), the largest part of
the daemon's start-up. Netlink through pyroute2 stays where it is needed (nodeos.net).
"""

from __future__ import annotations

import json
import subprocess


def interface_addresses(timeout_s: float = 60.0) -> list[tuple[str, str]]:
    """(interface, address) pairs, in the kernel's order; raises OSError/ValueError when `ip`
    is missing or its output is not the JSON it should be."""
    try:
        proc = subprocess.run(
            ["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=timeout_s, check=True
        )
    except subprocess.SubprocessError as exc:
        raise OSError(f"`ip -j addr show` failed: {exc}") from exc
    links = json.loads(proc.stdout)
    if not isinstance(links, list):
        raise ValueError("`ip -j addr show` did not print a list")
    return [
        (str(link.get("ifname")), str(a["local"]))
        for link in links
        if isinstance(link, dict)
        for a in link.get("addr_info") or []
        if isinstance(a, dict) and a.get("local")
    ]
