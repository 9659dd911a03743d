"""Observed state readers: what the kernel and the NIC hold now.

Everything is read in one pass (links, addresses, routes, sysctls, DCB, RDMA, knobs) into
plain data that the pure planner compares with the desired state.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from nodeos.errors import NodeosError
from nodeos.net import marking, pr2compat, rdma
from nodeos.net.dcb import DcbState
from nodeos.net.dcbsock import DcbSocket, NoDcbSupport
from nodeos.net.model import NetConfig
from nodeos.net.netns import run_in

IFF_UP = 0x1
RTAX_FEATURE_ECN = 0x1
MAIN_TABLE = 254
SYSCTL_ROOT = Path("/proc/sys")
# Userspace DCB agents that would undo what we set (and that we refuse to fight).
DCB_AGENTS = ("lldpad", "dcbd", "lldpd")
pr2compat.ensure_route_cc_algo()  # before any route message is built


@dataclass(frozen=True)
class LinkState:
    name: str
    index: int
    mtu: int
    min_mtu: int
    max_mtu: int
    up: bool
    operstate: str
    qdisc: str | None
    num_tx_queues: int
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class RouteState:
    dst: str
    gateway: str | None
    oif: str | None
    metric: int | None
    proto: int
    congctl: str | None
    ecn: bool


@dataclass
class Observed:
    links: dict[str, LinkState]
    routes: list[RouteState]
    sysctls: dict[str, str | None]
    available_cc: tuple[str, ...]
    dcb: dict[str, DcbState | str] = field(default_factory=dict)  # str: why it is unavailable
    rdma_ports: list[rdma.RdmaPort] = field(default_factory=list)
    roce_tos: dict[str, int | None] = field(default_factory=dict)  # "dev/port" -> ToS
    knobs: dict[str, str | None] = field(default_factory=dict)  # path -> value (None: absent)
    dcb_agents: list[str] = field(default_factory=list)
    dscp_mark: str | None = None  # comment of nodeos' nftables marking rules (see marking.py)


def _addr_text(msg: Any) -> str | None:
    ip = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
    if ip is None:
        return None
    if ipaddress.ip_address(ip).is_link_local:
        return None  # IPv6 link-local addresses belong to the kernel, not to the profile
    return f"{ip}/{msg['prefixlen']}"


def read_links(ipr: IPRoute) -> dict[str, LinkState]:
    addrs: dict[int, list[str]] = {}
    for a in ipr.get_addr():
        text = _addr_text(a)
        if text:
            addrs.setdefault(a["index"], []).append(text)
    out: dict[str, LinkState] = {}
    for m in ipr.get_links():
        name = m.get_attr("IFLA_IFNAME")
        out[name] = LinkState(
            name=name,
            index=m["index"],
            mtu=m.get_attr("IFLA_MTU") or 0,
            min_mtu=m.get_attr("IFLA_MIN_MTU") or 0,
            max_mtu=m.get_attr("IFLA_MAX_MTU") or 0,
            up=bool(m["flags"] & IFF_UP),
            operstate=m.get_attr("IFLA_OPERSTATE") or "UNKNOWN",
            qdisc=m.get_attr("IFLA_QDISC"),
            num_tx_queues=m.get_attr("IFLA_NUM_TX_QUEUES") or 1,
            addresses=tuple(sorted(addrs.get(m["index"], []))),
        )
    return out


def read_routes(ipr: IPRoute, names: dict[int, str]) -> list[RouteState]:
    out: list[RouteState] = []
    for r in ipr.get_routes(table=MAIN_TABLE):
        dst = r.get_attr("RTA_DST")
        family_default = "0.0.0.0" if r["family"] == 2 else "::"
        metrics = r.get_attr("RTA_METRICS")
        cc = feats = None
        if metrics is not None:
            cc = metrics.get_attr("RTAX_CC_ALGO")
            feats = metrics.get_attr("RTAX_FEATURES")
        net = ipaddress.ip_network(f"{dst or family_default}/{r['dst_len']}", strict=False)
        out.append(
            RouteState(
                dst=str(net),
                gateway=r.get_attr("RTA_GATEWAY"),
                oif=names.get(r.get_attr("RTA_OIF") or -1),
                metric=r.get_attr("RTA_PRIORITY"),
                proto=r["proto"],
                congctl=cc,
                ecn=bool((feats or 0) & RTAX_FEATURE_ECN),
            )
        )
    return out


def sysctl_path(name: str) -> Path:
    return SYSCTL_ROOT / name.replace(".", "/")


def read_sysctl(name: str) -> str | None:
    try:
        return sysctl_path(name).read_text().strip()
    except OSError:
        return None


def dcb_agents() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm in DCB_AGENTS:
            found.append(f"{comm} (pid {pid})")
    return sorted(found)


def read_dcb(names: list[str]) -> dict[str, DcbState | str]:
    out: dict[str, DcbState | str] = {}
    with DcbSocket() as s:
        for n in names:
            try:
                out[n] = s.get(n)
            except NoDcbSupport as exc:
                out[n] = exc.message
            except NodeosError as exc:
                out[n] = exc.message
    return out


def knob_paths(cfg: NetConfig) -> list[str]:
    paths = []
    for iface in cfg.interfaces:
        for tmpl in cfg.qos.ecn_knobs:
            for prio in cfg.qos.ecn_priorities:
                paths.append(tmpl.format(netdev=iface.name, prio=prio))
    return paths


def _read_knob(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def observe(cfg: NetConfig | None, netns: str | None = None, with_dcb: bool = True) -> Observed:
    """Read everything the config touches (or, without a config, the general picture)."""

    def work() -> Observed:
        with IPRoute() as ipr:
            links = read_links(ipr)
            routes = read_routes(ipr, {ln.index: ln.name for ln in links.values()})
        names = [i.name for i in cfg.interfaces if i.name in links] if cfg else []
        wanted_sysctls = set(cfg.qos.sysctls) if cfg else set()
        wanted_sysctls |= {"net.ipv4.tcp_ecn", "net.ipv4.tcp_congestion_control"}
        sysctls = {k: read_sysctl(k) for k in sorted(wanted_sysctls)}
        avail = (read_sysctl("net.ipv4.tcp_available_congestion_control") or "").split()
        obs = Observed(links=links, routes=routes, sysctls=sysctls, available_cc=tuple(avail))
        needs_dcb = cfg is not None and cfg.qos.dcb is not None
        if with_dcb and (needs_dcb or cfg is None):
            obs.dcb = read_dcb(names if cfg else sorted(n for n in links if n != "lo"))
        obs.rdma_ports = rdma.inventory()
        for p in obs.rdma_ports:
            obs.roce_tos[f"{p.device}/{p.port}"] = rdma.read_roce_tos(p.device, p.port)
        if cfg is not None:
            obs.knobs = {p: _read_knob(p) for p in knob_paths(cfg)}
        obs.dcb_agents = dcb_agents()
        if cfg is not None and cfg.qos.storage_dscp is not None:
            obs.dscp_mark = marking.read()
        return obs

    return run_in(netns, work)
