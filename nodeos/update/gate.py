"""The health gate of a freshly updated slot (`nodeos-health-gate`, its unit
systemd/nodeos-health-gate.service, ordered before boot-complete.target).

It runs only on a boot systemd-boot is counting (the slot's first boot after an update). It
passes once nodeosd is ready (systemd: active, i.e. it sent READY=1) and, on a cluster member,
once the node is back in its cluster (its cluster service runs and knows a leader, and the
daemon reports no failure). Then boot-complete.target is reached and systemd-bless-boot keeps
the slot. It fails when systemd gave up on nodeosd, when the cluster service failed, or when
GATE_BOUND_S passes first; its unit then reboots the machine, and systemd-boot, whose counter
for the new slot ran out, boots the old one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

MAX_FAILED_STARTS = 3  # nodeosd that failed to start this often on this boot: the slot is broken
GATE_BOUND_S = 600.0  # nodeosd under an emulated CPU takes minutes; a real node seconds
POLL_S = 2.0
API_SOCKET = "/run/nodeos/api.sock"


def assess(nodeosd: str, status: dict[str, Any] | None, restarts: int = 0) -> tuple[str, str]:
    """("pass" | "wait" | "fail", why) from `systemctl is-active nodeosd`, its `status` and how
    often systemd restarted it on this boot (Restart=always never gives up on a daemon that dies
    at once: without counting, only the bound would end the gate)."""
    if nodeosd == "failed":
        return "fail", "nodeosd failed (systemd stopped restarting it)"
    if nodeosd != "active" and restarts >= MAX_FAILED_STARTS:
        return "fail", f"nodeosd failed to start {restarts} times on this slot"
    if nodeosd != "active" or status is None:
        return "wait", f"nodeosd is not ready yet ({nodeosd})"
    cl = status.get("cluster") or {}
    if cl.get("role") == "failed":
        return "fail", f"the cluster service failed: {cl.get('failure')}"
    failures = (status.get("health") or {}).get("failures") or {}
    if failures:
        return "wait", "nodeosd reports failures: " + "; ".join(
            f"{k}: {v}" for k, v in sorted(failures.items())
        )
    if not cl.get("member") or cl.get("solo"):
        return "pass", "nodeosd is ready (no other cluster member to rejoin)"
    if not cl.get("leader"):
        return "wait", f"not back in cluster {cl.get('cluster_id')} yet (no leader known)"
    return "pass", f"nodeosd is ready and back in cluster {cl.get('cluster_id')} (leader {cl['leader']})"


def run(
    probe: Callable[[], tuple[str, dict[str, Any] | None] | tuple[str, dict[str, Any] | None, int]],
    *,
    bound_s: float = GATE_BOUND_S,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = lambda m: print(m, flush=True),
) -> bool:
    """Probe until pass, fail or the bound; says why at each change and at the end."""
    deadline = clock() + bound_s
    last = ""
    while True:
        verdict, why = assess(*probe())
        if why != last:
            say(f"health gate: {why}")
            last = why
        if verdict != "wait":
            return verdict == "pass"
        if clock() >= deadline:
            say(f"health gate: FAILED after {bound_s:.0f} s: {why}")
            return False
        sleep(poll_s)


def probe_node() -> tuple[str, dict[str, Any] | None, int]:
    """This machine: nodeosd's systemd state, restarts, and its status over the API socket once active."""
    state = subprocess.run(
        ["systemctl", "is-active", "nodeosd.service"], capture_output=True, text=True, check=False
    ).stdout.strip()
    show = ["systemctl", "show", "-P", "NRestarts", "nodeosd.service"]
    n = subprocess.run(show, capture_output=True, text=True, check=False).stdout.strip()
    restarts = int(n) if n.isdigit() else 0
    if state != "active":
        return state or "unknown", None, restarts
    from nodeos.errors import NodeosError
    from nodeos.rpc.client import Client

    try:
        return state, Client(API_SOCKET, timeout_s=10.0).call("status"), restarts
    except (NodeosError, OSError):
        return "activating", None, 0  # ready, but not answering yet: wait


def main() -> int:
    return 0 if run(probe_node) else 1


if __name__ == "__main__":
    sys.exit(main())
