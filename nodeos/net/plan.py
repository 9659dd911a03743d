"""The planner: desired config + observed state -> ordered list of changes. Pure.

Each change records the value before and after, so it is idempotent (applying it when the
system already holds `after` changes nothing) and reversible (its reverse swaps the two).
An empty plan means the system already matches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from nodeos.errors import BadInput
from nodeos.net import dcb, marking
from nodeos.net.model import NODEOS_RTPROTO, InterfaceSpec, NetConfig, RouteSpec
from nodeos.net.observe import Observed, RouteState
from nodeos.net.profiles import DcbSettings

# Apply order: global knobs, then links before their addresses and routes, new addresses
# before old ones go (so a re-address never leaves the link without one), QoS last.
ORDER = (
    "sysctl",
    "mtu",
    "link",
    "address_add",
    "route",
    "address_del",
    "qdisc",
    "dscp_mark",
    "dcbx",
    "ets",
    "pfc",
    "dcb_app",
    "trust",
    "roce_tos",
    "knob",
)
RISKY_KINDS = {
    "mtu",
    "link",
    "address_add",
    "address_del",
    "route",
    "qdisc",
    "dcbx",
    "ets",
    "pfc",
    "dcb_app",
    "trust",
}


@dataclass(frozen=True)
class Change:
    kind: str
    target: str  # interface, sysctl name, rdma "device/port" or knob path
    before: Any
    after: Any
    risky: bool = False  # can cut the node off its management path
    extra: dict[str, Any] = field(default_factory=dict)

    def reverse(self) -> Change:
        kind = {"address_add": "address_del", "address_del": "address_add"}.get(self.kind, self.kind)
        return replace(
            self, kind=kind, before=self.after, after=self.before, extra={**self.extra, "reverse": True}
        )

    def describe(self) -> str:
        if self.kind == "address_add":
            return f"{self.target}: add address {self.after}"
        if self.kind == "address_del":
            return f"{self.target}: remove address {self.before}"
        if self.kind == "route":
            if self.after is None:
                return f"{self.target}: remove route {_route_text(self.before)}"
            if self.before is None:
                return f"{self.target}: add route {_route_text(self.after)}"
            return f"{self.target}: change route {_route_text(self.before)} -> {_route_text(self.after)}"
        if self.kind == "dcb_app":
            if self.after is None:
                return f"{self.target}: remove DCB APP entry {_app_text(self.before)}"
            return f"{self.target}: add DCB APP entry {_app_text(self.after)}"
        return f"{self.target}: {self.kind} {_short(self.before)} -> {_short(self.after)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "before": self.before,
            "after": self.after,
            "risky": self.risky,
            "description": self.describe(),
        }


@dataclass
class Plan:
    changes: list[Change]
    blockers: list[dict[str, Any]]  # problems that stop an apply: {item, message, code}
    warnings: list[str]

    @property
    def risky(self) -> list[Change]:
        return [c for c in self.changes if c.risky]

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": [c.to_dict() for c in self.changes],
            "blockers": self.blockers,
            "warnings": self.warnings,
        }


def _short(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={v[k]}" for k in sorted(v) if k in _SHOWN) + "}"
    return repr(v)


_SHOWN = {"prio_tc", "tc_tsa", "tc_tx_bw", "pfc_en", "willing", "selectors"}


def _route_text(r: dict[str, Any] | None) -> str:
    if not r:
        return "-"
    parts = [r["dst"]]
    if r.get("gateway"):
        parts.append(f"via {r['gateway']}")
    if r.get("metric") is not None:
        parts.append(f"metric {r['metric']}")
    if r.get("congctl"):
        parts.append(f"congctl {r['congctl']}")
    if r.get("ecn"):
        parts.append("features ecn")
    return " ".join(parts)


def _app_text(a: list[int]) -> str:
    sel = {dcb.SEL_DSCP: "dscp", dcb.SEL_PCP: "pcp"}.get(a[0], f"selector {a[0]}")
    return f"{sel} {a[2]} -> priority {a[1]}"


def _check_against_system(cfg: NetConfig, obs: Observed) -> None:
    """Errors in the request that only the live system can reveal (nothing applied yet)."""
    existing = sorted(obs.links)
    for i, iface in enumerate(cfg.interfaces):
        link = obs.links.get(iface.name)
        if link is None:
            raise BadInput(f"unknown interface {iface.name}", field=f"interfaces[{i}].name", allowed=existing)
        if iface.mtu is not None and link.max_mtu and not link.min_mtu <= iface.mtu <= link.max_mtu:
            raise BadInput(
                f"MTU {iface.mtu} is out of range for {iface.name}",
                field=f"interfaces[{i}].mtu",
                allowed=f"{link.min_mtu}-{link.max_mtu}",
            )
    if cfg.management.interface and cfg.management.interface not in obs.links:
        raise BadInput(
            f"unknown management interface {cfg.management.interface}",
            field="management.interface",
            allowed=existing,
        )


def _risky(cfg: NetConfig, kind: str, iface: str, removing: bool) -> bool:
    if kind not in RISKY_KINDS:
        return False
    mgmt = cfg.management.interface
    if mgmt is not None:
        return iface == mgmt
    # No management interface named: anything that removes connectivity may be the path.
    return removing


def _route_dict(r: RouteSpec | RouteState, congctl: str | None, ecn: bool) -> dict[str, Any]:
    return {"dst": r.dst, "gateway": r.gateway, "metric": r.metric, "congctl": congctl, "ecn": ecn}


def _plan_interface(cfg: NetConfig, iface: InterfaceSpec, obs: Observed, out: list[Change]) -> None:
    link = obs.links[iface.name]
    n = iface.name

    def add(kind: str, before: Any, after: Any, removing: bool = False, **extra: Any) -> None:
        out.append(Change(kind, n, before, after, _risky(cfg, kind, n, removing), extra))

    if iface.mtu is not None and link.mtu != iface.mtu:
        add("mtu", link.mtu, iface.mtu)
    if link.up != iface.up:
        add("link", "up" if link.up else "down", "up" if iface.up else "down", removing=not iface.up)
    if iface.addresses is not None:
        for a in iface.addresses:
            if a not in link.addresses:
                add("address_add", None, a)
        for a in link.addresses:
            if a not in iface.addresses:
                add("address_del", a, None, removing=True)
    if iface.routes is not None:
        cc, ecn = cfg.qos.route_congestion_control, cfg.qos.route_ecn
        mine = [r for r in obs.routes if r.oif == n]
        wanted = {r.dst: r for r in iface.routes}
        for spec in iface.routes:
            want = _route_dict(spec, cc, ecn)
            have = next(
                (r for r in mine if r.dst == spec.dst and (spec.metric is None or r.metric == spec.metric)),
                None,
            )
            if have is None:
                add("route", None, want)
                continue
            got = _route_dict(have, have.congctl, have.ecn)
            if spec.metric is None:
                got["metric"] = None
            if got != want:
                add("route", {**got, "metric": have.metric}, want, removing=True)
        for r in mine:
            if r.proto == NODEOS_RTPROTO and r.dst not in wanted:
                add("route", _route_dict(r, r.congctl, r.ecn), None, removing=True)
    if cfg.qos.qdisc is not None and link.qdisc != cfg.qos.qdisc:
        add("qdisc", link.qdisc, cfg.qos.qdisc)


def _ets_after(have: dcb.Ets | None, want: DcbSettings) -> dict[str, Any]:
    base = have or dcb.Ets()
    tsa = tuple(dcb.TSA_BY_NAME[t] for t in want.tc_tsa)
    return asdict(replace(base, willing=0, tc_tx_bw=want.tc_bw, tc_tsa=tsa, prio_tc=want.prio_tc))


def _ets_matches(have: dcb.Ets | None, want: DcbSettings) -> bool:
    if have is None:
        return False
    tsa = tuple(dcb.TSA_BY_NAME[t] for t in want.tc_tsa)
    return (
        have.willing == 0
        and have.prio_tc == want.prio_tc
        and have.tc_tsa == tsa
        and have.tc_tx_bw == want.tc_bw
    )


def _plan_dcb(cfg: NetConfig, iface: InterfaceSpec, state: dcb.DcbState, out: list[Change]) -> None:
    want = cfg.qos.dcb
    assert want is not None
    n = iface.name

    def add(kind: str, before: Any, after: Any) -> None:
        out.append(Change(kind, n, before, after, _risky(cfg, kind, n, True)))

    mode = dcb.DCBX_MODE_BITS[want.dcbx]
    if state.dcbx is not None and state.dcbx != mode:
        add("dcbx", state.dcbx, mode)
    if not _ets_matches(state.ets, want):
        add("ets", None if state.ets is None else asdict(state.ets), _ets_after(state.ets, want))
    pfc_en = sum(1 << p for p in want.pfc_enabled)
    if state.pfc is None or state.pfc.pfc_en != pfc_en:
        base = state.pfc or dcb.Pfc(pfc_cap=8)
        after = asdict(replace(base, pfc_en=pfc_en))
        add("pfc", None if state.pfc is None else asdict(state.pfc), after)
    wanted_apps = {dcb.App(dcb.SEL_DSCP, prio, dscp) for dscp, prio in want.dscp_prio}
    for app in sorted(wanted_apps - set(state.apps)):
        add("dcb_app", None, [app.selector, app.priority, app.protocol])
    wanted_dscps = {a.protocol for a in wanted_apps}
    for app in state.apps:
        # A DSCP we map that also points at another priority would make the mapping ambiguous.
        if app.selector == dcb.SEL_DSCP and app.protocol in wanted_dscps and app not in wanted_apps:
            add("dcb_app", [app.selector, app.priority, app.protocol], None)
    if state.trust is not None:
        sel = [dcb.TRUST_NAMES[want.trust]]
        if list(state.trust) != sel:
            add("trust", list(state.trust), sel)


def make_plan(cfg: NetConfig, obs: Observed) -> Plan:
    _check_against_system(cfg, obs)
    changes: list[Change] = []
    blockers: list[dict[str, Any]] = []
    warnings: list[str] = []
    for name, value in cfg.qos.sysctls.items():
        have = obs.sysctls.get(name)
        if name == "net.ipv4.tcp_congestion_control" and value not in obs.available_cc:
            blockers.append(_cc_blocker(name, value, obs))
            continue
        if have is None:
            blockers.append(
                {
                    "item": f"sysctl {name}",
                    "code": "environment",
                    "message": f"sysctl {name} does not exist in this kernel",
                }
            )
        elif have != value:
            changes.append(Change("sysctl", name, have, value))
    rcc = cfg.qos.route_congestion_control
    if (
        rcc is not None
        and rcc not in obs.available_cc
        and any(i.routes for i in cfg.interfaces)
        and rcc != cfg.qos.sysctls.get("net.ipv4.tcp_congestion_control")
    ):
        blockers.append(_cc_blocker("qos.route_congestion_control", rcc, obs))
    for iface in cfg.interfaces:
        _plan_interface(cfg, iface, obs, changes)
    if cfg.qos.storage_dscp is not None:
        want = marking.spec_comment(cfg.qos.storage_dscp, cfg.qos.storage_ports)
        if obs.dscp_mark == marking.NFT_MISSING:
            blockers.append(
                {
                    "item": "qos.storage_dscp",
                    "code": "environment",
                    "message": "nft (Debian package nftables) is not installed: needed to mark storage "
                    "traffic with DSCP",
                }
            )
        elif obs.dscp_mark != want:
            changes.append(Change("dscp_mark", f"nftables inet {marking.TABLE}", obs.dscp_mark, want))
    if cfg.qos.dcb is not None:
        if obs.dcb_agents:
            blockers.append(
                {
                    "item": "dcb agent",
                    "code": "failed",
                    "message": f"another DCB agent is active: {', '.join(obs.dcb_agents)}; nodeos will not "
                    "fight it over the NIC's DCB settings - stop it (e.g. systemctl stop lldpad) "
                    "or use profile 'none'",
                }
            )
        for iface in cfg.interfaces:
            state = obs.dcb.get(iface.name)
            if isinstance(state, dcb.DcbState):
                _plan_dcb(cfg, iface, state, changes)
            else:
                blockers.append(
                    {
                        "item": f"{iface.name} dcb",
                        "code": "not_supported",
                        "message": state or f"this NIC has no DCB support: interface {iface.name}",
                    }
                )
    _plan_rdma(cfg, obs, changes, warnings)
    changes.sort(key=lambda c: ORDER.index(c.kind))  # stable: keeps per-kind config order
    return Plan(changes=changes, blockers=blockers, warnings=warnings)


def _cc_blocker(item: str, value: str, obs: Observed) -> dict[str, Any]:
    return {
        "item": item,
        "code": "environment",
        "message": f"TCP congestion control {value!r} is not available in this kernel (available: "
        f"{' '.join(obs.available_cc) or 'none'}); load tcp_{value} or set qos.congestion_control",
    }


def _plan_rdma(cfg: NetConfig, obs: Observed, changes: list[Change], warnings: list[str]) -> None:
    if cfg.qos.roce_tos is None:
        return
    names = {i.name for i in cfg.interfaces}
    covered = set()
    for p in obs.rdma_ports:
        if p.netdev not in names or p.link_layer != "Ethernet":
            continue
        covered.add(p.netdev)
        key = f"{p.device}/{p.port}"
        if obs.roce_tos.get(key) != cfg.qos.roce_tos:
            changes.append(Change("roce_tos", key, obs.roce_tos.get(key), cfg.qos.roce_tos))
    for n in sorted(names - covered):
        warnings.append(f"{n}: no RoCE device on this interface; rdma_cm ToS not set")
    for path, value in obs.knobs.items():
        if value is None:
            warnings.append(f"ECN knob {path} is not exposed by this driver")
        elif value != "1":
            changes.append(Change("knob", path, value, "1"))
