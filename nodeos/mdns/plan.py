"""What this node advertises over mDNS (pure): facts and options in, a set of records out.

One DNS-SD service per (storage interface, transport) on which the node keeps a discovery
controller, as TP8009 and nvme-stas expect it: type `_nvme-disc._tcp`, the discovery port (8009),
TXT `p=tcp` or `p=roce` and `nqn=<discovery NQN>`, the interface's listener addresses as the
host's A/AAAA records. Per interface, never one record set for all: a GPU node on storage
network A must not resolve the node to its address on network B (nvme-stas connects to what it
resolves, on the interface it heard it on).

Nothing is advertised while the node is drained, its data plane is down, it keeps no discovery
controller (it exports nothing and, on the kernel target, refers hosts to no other node), or
mDNS is switched off. A management interface (the network config's `management.interface`, or
one that holds the peer, REST or metrics listen address) is left out unless the operator
allows it (`mdns_management = true`: sites, like the lab, with one network for everything).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

SERVICE_TYPE = "_nvme-disc._tcp.local."
# TXT `p`: nvme-stas maps tcp -> tcp and roce|iwarp|rdma -> rdma; nodeos's RDMA is RoCE.
PROTOCOL_OF = {"tcp": "tcp", "rdma": "roce"}
LABEL_MAX = 63  # one DNS label
_NOT_IN_LABEL = re.compile(r"[^A-Za-z0-9-]+")


@dataclass(frozen=True, order=True)
class Advert:
    """One DNS-SD service instance on one interface."""

    interface: str
    protocol: str  # TXT p: "tcp" | "roce"
    addresses: tuple[str, ...]  # the host's A/AAAA records on this interface, sorted
    port: int
    nqn: str
    instance: str  # the instance label, unique per node, interface and protocol
    host: str  # the SRV target, "<label>.local.", unique per node and interface

    @property
    def name(self) -> str:
        return f"{self.instance}.{SERVICE_TYPE}"

    def txt(self) -> dict[str, str]:
        return {"p": self.protocol, "nqn": self.nqn}


@dataclass(frozen=True)
class Facts:
    """What the node is now. `listeners`: (trtype, traddr) of its data plane's listeners;
    `interfaces`: (interface, address) as the kernel holds them now."""

    node_name: str
    listeners: tuple[tuple[str, str], ...]
    interfaces: tuple[tuple[str, str], ...]
    discovery_port: int | None  # None: the data plane keeps no discovery controller
    nqn: str
    serving: bool = True  # it exports something, so its discovery controller exists
    draining: bool = False
    dataplane_down: bool = False
    management_addresses: frozenset[str] = frozenset()  # peer, REST, metrics listen hosts
    management_interfaces: frozenset[str] = frozenset()  # the network config's management.interface
    node_id: str = ""  # the node's stable id: a few of its characters keep host names apart


@dataclass(frozen=True)
class Options:
    enabled: bool = True  # `mdns` in nodeosd.toml
    management: bool = False  # `mdns_management`: advertise on management interfaces too


@dataclass(frozen=True)
class Decision:
    adverts: frozenset[Advert]
    notes: tuple[str, ...] = field(default=())  # why something is not advertised


def _norm(addr: str) -> str | None:
    try:
        return str(ipaddress.ip_address(addr.split("%", 1)[0]))
    except ValueError:
        return None


def label(text: str) -> str:
    """`text` as one DNS label (letters, digits, '-'); a long one keeps a hash of the whole."""
    s = _NOT_IN_LABEL.sub("-", text).strip("-") or "nodeos"
    if len(s) <= LABEL_MAX:
        return s
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{s[: LABEL_MAX - 9].rstrip('-')}-{digest}"


def management_interfaces(facts: Facts) -> frozenset[str]:
    """The interfaces that carry management: named as such, or holding a management address."""
    mgmt = {a for a in map(_norm, facts.management_addresses) if a is not None}
    held = {ifname for ifname, a in facts.interfaces if _norm(a) in mgmt}
    return frozenset(held | set(facts.management_interfaces))


def _usable(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified)


def decide(facts: Facts, opts: Options) -> Decision:
    """The records the node should advertise now, and why others are not."""
    if not opts.enabled:
        return Decision(frozenset(), ("mDNS is off (mdns = false)",))
    for cond, why in (
        (facts.discovery_port is None, "the data plane keeps no discovery controller"),
        (facts.draining, "the node is draining"),
        (facts.dataplane_down, "the data plane is down"),
        (
            not facts.serving,
            "the node keeps no discovery controller: it exports nothing and refers to no node",
        ),
    ):
        if cond:
            return Decision(frozenset(), (why,))
    assert facts.discovery_port is not None
    where: dict[str, set[str]] = {}
    for ifname, a in facts.interfaces:
        n = _norm(a)
        if n is not None:
            where.setdefault(n, set()).add(ifname)
    mgmt = management_interfaces(facts)
    notes: list[str] = []
    groups: dict[tuple[str, str], set[str]] = {}
    for trtype, traddr in sorted(set(facts.listeners)):
        proto = PROTOCOL_OF.get(trtype)
        addr = _norm(traddr)
        if proto is None or addr is None:
            continue
        if not _usable(ipaddress.ip_address(addr)):
            notes.append(f"{addr}: loopback, link-local or unspecified: not advertised")
            continue
        ifnames = where.get(addr)
        if not ifnames:
            notes.append(f"{addr} is on no interface now: not advertised")
            continue
        for ifname in sorted(ifnames):
            if ifname in mgmt and not opts.management:
                notes.append(f"{ifname} is a management interface: left out (mdns_management = false)")
                continue
            groups.setdefault((ifname, proto), set()).add(addr)
    adverts = frozenset(
        _advert(facts, ifname, proto, addrs, facts.discovery_port)
        for (ifname, proto), addrs in groups.items()
    )
    return Decision(adverts, tuple(dict.fromkeys(notes)))


def _advert(facts: Facts, ifname: str, proto: str, addrs: Iterable[str], port: int) -> Advert:
    return Advert(
        interface=ifname,
        protocol=proto,
        addresses=tuple(sorted(addrs, key=lambda a: (":" in a, a))),
        port=port,
        nqn=facts.nqn,
        instance=label(f"{facts.node_name}-{ifname}-{proto}"),
        host=f"{label(_host(facts, ifname))}.local.",
    )


def _host(facts: Facts, ifname: str) -> str:
    """The SRV target's label: node, interface and 6 characters of the node's id. Names are
    unique within a cluster, not between two clusters on one network; mDNS probes service
    names (a clash is renamed) but not host names, and two hosts announcing one host name
    with different addresses flush each other's records from every cache."""
    tag = _NOT_IN_LABEL.sub("", facts.node_id)[:6]
    return f"{facts.node_name}-{ifname}-{tag}" if tag else f"{facts.node_name}-{ifname}"


def bind_addresses(adverts: Iterable[Advert]) -> dict[str, tuple[str, ...]]:
    """Per interface, the addresses the publisher binds its sockets to: one per IP family (one
    socket per family and interface: two would answer every query twice)."""
    out: dict[str, dict[bool, str]] = {}
    for adv in sorted(adverts):
        fams = out.setdefault(adv.interface, {})
        for a in adv.addresses:
            fams.setdefault(":" in a, a)
    return {ifname: tuple(fams[v6] for v6 in sorted(fams)) for ifname, fams in out.items()}
