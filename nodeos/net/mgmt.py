"""The management path: is the node still reachable after a change?

Definition (documented in docs/network.md): the path is healthy when the configured
`management.interface` exists, is administratively up, is not down at the link level and
still holds an address; and, when `management.probe` is set, that address answers an ICMP
echo. Must run inside the target namespace.
"""

from __future__ import annotations

import ipaddress
import os
import select
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from pyroute2 import IPRoute

from nodeos.net.model import NetConfig
from nodeos.net.observe import read_links


@dataclass
class Health:
    ok: bool
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems}


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def icmp_echo(target: str, timeout: float = 1.0) -> bool:
    """One ICMP (or ICMPv6) echo round trip over a raw socket (root only)."""
    v6 = ipaddress.ip_address(target).version == 6
    fam, proto = (socket.AF_INET6, socket.IPPROTO_ICMPV6) if v6 else (socket.AF_INET, socket.IPPROTO_ICMP)
    req_type, rep_type = (128, 129) if v6 else (8, 0)
    ident = os.getpid() & 0xFFFF
    seq = int.from_bytes(os.urandom(2), "big")
    payload = b"nodeos-mgmt-probe"
    hdr = struct.pack("!BBHHH", req_type, 0, 0, ident, seq)
    # The kernel fills the ICMPv6 checksum itself (it needs the pseudo-header).
    csum = 0 if v6 else _checksum(hdr + payload)
    packet = struct.pack("!BBHHH", req_type, 0, csum, ident, seq) + payload
    with socket.socket(fam, socket.SOCK_RAW, proto) as s:
        try:
            s.sendto(packet, (target, 0))
        except OSError:
            return False  # e.g. ENETUNREACH: no route any more
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([s], [], [], left)
            if not ready:
                return False
            data, _addr = s.recvfrom(2048)
            icmp = data if v6 else data[(data[0] & 0x0F) * 4 :]
            if len(icmp) >= 8:
                t, _c, _sum, rid, rseq = struct.unpack_from("!BBHHH", icmp)
                if t == rep_type and rid == ident and rseq == seq:
                    return True
    return False


def management_health(cfg: NetConfig) -> Health:
    problems: list[str] = []
    m = cfg.management
    if m.interface:
        with IPRoute() as ipr:
            links = read_links(ipr)
        link = links.get(m.interface)
        if link is None:
            problems.append(f"management interface {m.interface} is gone")
        else:
            if not link.up:
                problems.append(f"management interface {m.interface} is down")
            elif link.operstate in ("DOWN", "LOWERLAYERDOWN"):
                problems.append(f"management interface {m.interface} has no link ({link.operstate})")
            if not link.addresses:
                problems.append(f"management interface {m.interface} has no address")
    if m.probe and not problems and not icmp_echo(m.probe):
        problems.append(f"probe {m.probe} does not answer")
    return Health(ok=not problems, problems=problems)
