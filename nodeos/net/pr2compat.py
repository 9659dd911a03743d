"""Small gaps between pyroute2 versions (the image's Debian package is older than the venv's).

pyroute2 before 0.9 has no RTAX_CC_ALGO (metric 16, the per-route congestion control) in
its route metrics table, so `congctl` would be silently dropped on write and invisible on
read. Append it where it is missing; newer versions are left untouched.
"""

from __future__ import annotations

from pyroute2.netlink.rtnl.rtmsg import rtmsg

RTAX_CC_ALGO = 16


def ensure_route_cc_algo() -> None:
    metrics = rtmsg.metrics
    names = [entry[0] if isinstance(entry[0], str) else entry[1] for entry in metrics.nla_map]
    if "RTAX_CC_ALGO" in names:
        return
    # The older table is positional (index = attribute type) and ends at RTAX_QUICKACK (15).
    if names[-1] == "RTAX_QUICKACK" and len(names) == RTAX_CC_ALGO and isinstance(metrics.nla_map[0][0], str):
        metrics.nla_map = (*metrics.nla_map, ("RTAX_CC_ALGO", "asciiz"))


ensure_route_cc_algo()
