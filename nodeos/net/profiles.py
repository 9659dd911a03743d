"""QoS profiles: named sets of parameters, and their resolution into concrete settings.

Every number the network code sets comes from here (a profile default or an operator
override from the config), never from a constant buried in an applier.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeos.errors import BadInput

# ECN codepoint ECT(0) in the low two bits of the ToS byte: RoCE packets leave ECN-capable
# so the switch can mark instead of drop/pause.
ECT0 = 2

# The knob layout of mlx5-class drivers that expose ECN (DCQCN) per priority in sysfs.
# Paths that do not exist on a given driver are reported as "not exposed", never forced.
MLX5_ECN_KNOBS: tuple[str, ...] = (
    "/sys/class/net/{netdev}/ecn/roce_np/enable/{prio}",
    "/sys/class/net/{netdev}/ecn/roce_rp/enable/{prio}",
)

PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    # RoCEv2 storage: lossless priority with PFC, CNPs in a strict class, DSCP trust.
    "roce-lossless": {
        "mtu": 9000,
        "roce_priority": 3,
        "roce_dscp": 26,
        "cnp_priority": 6,
        "cnp_dscp": 48,
        "roce_share": 50,
        "default_share": 50,
        "pfc_priorities": None,  # None: the RoCE priority only
        "roce_tos": None,  # None: roce_dscp with ECT(0)
        "dcbx": "host-ieee",
        "trust": "dscp",
        # False: the NIC's DCB is owned elsewhere (firmware DCBX, a NIC without DCB such as
        # Soft-RoCE on virtio); only the RoCE ToS and ECN knobs are set.
        "manage_dcb": True,
        "ecn_knobs": list(MLX5_ECN_KNOBS),
        "tcp_ecn": None,
        "congestion_control": None,
        "route_congestion_control": None,
        "route_ecn": False,
        "qdisc": None,
        "storage_dscp": None,
    },
    # NVMe/TCP storage: a lossy class with ECN marking and DCTCP.
    "tcp-dctcp": {
        "mtu": 9000,
        "tcp_ecn": 1,
        "congestion_control": "dctcp",
        "route_congestion_control": "dctcp",
        "route_ecn": True,
        "qdisc": "fq_codel",
        "storage_dscp": 10,
        "storage_ports": [4420],  # NVMe/TCP; DSCP-marked in both directions
    },
    # Addresses, routes and MTU only; nothing QoS-related is touched.
    "none": {
        "mtu": None,
        "tcp_ecn": None,
        "congestion_control": None,
        "route_congestion_control": None,
        "route_ecn": False,
        "qdisc": None,
        "storage_dscp": None,
    },
}

PROFILES = tuple(PROFILE_DEFAULTS)
DCBX_MODES = ("host-ieee", "host-cee", "firmware")
TRUST_MODES = ("dscp", "pcp")
MTU_MIN, MTU_MAX = 68, 9216


@dataclass(frozen=True)
class DcbSettings:
    """What the DCB side of a NIC must hold for a profile."""

    prio_tc: tuple[int, ...]  # 8 entries: priority -> traffic class
    tc_tsa: tuple[str, ...]  # 8 entries: "ets" or "strict"
    tc_bw: tuple[int, ...]  # 8 entries: ETS share in percent (0 for strict)
    pfc_enabled: tuple[int, ...]  # priorities with PFC on
    dscp_prio: tuple[tuple[int, int], ...]  # (dscp, priority) APP entries
    dcbx: str
    trust: str


@dataclass(frozen=True)
class QosSettings:
    """A profile resolved against the operator's overrides: the complete desired QoS."""

    profile: str
    mtu: int | None
    dcb: DcbSettings | None
    roce_tos: int | None
    ecn_priorities: tuple[int, ...]
    ecn_knobs: tuple[str, ...]
    sysctls: dict[str, str] = field(default_factory=dict)
    route_congestion_control: str | None = None
    route_ecn: bool = False
    qdisc: str | None = None
    storage_dscp: int | None = None
    storage_ports: tuple[int, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)


def _int(params: dict[str, Any], name: str, lo: int, hi: int) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadInput(
            f"qos.{name} must be an integer from {lo} to {hi}, got {value!r}",
            field=f"qos.{name}",
            allowed=f"{lo}-{hi}",
        )
    return value


def _opt_int(params: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    return None if params.get(name) is None else _int(params, name, lo, hi)


def _choice(params: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str:
    value = params[name]
    if value not in allowed:
        raise BadInput(
            f"qos.{name} must be one of {', '.join(allowed)}, got {value!r}",
            field=f"qos.{name}",
            allowed=list(allowed),
        )
    return str(value)


def _priorities(params: dict[str, Any], name: str) -> tuple[int, ...]:
    value = params[name]
    if not isinstance(value, list) or not value:
        raise BadInput(
            f"qos.{name} must be a non-empty list of priorities 0-7", field=f"qos.{name}", allowed="0-7"
        )
    for p in value:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 7:
            raise BadInput(f"qos.{name} holds {p!r}; a priority is 0-7", field=f"qos.{name}", allowed="0-7")
    return tuple(sorted(set(value)))


def _cc_name(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.isidentifier() or len(value) > 15:
        raise BadInput(
            f"qos.{name} must name a TCP congestion control (e.g. dctcp, cubic)", field=f"qos.{name}"
        )
    return value


def resolve(qos: dict[str, Any]) -> QosSettings:
    """Merge a `[qos]` table over its profile's defaults and check every value."""
    name = qos.get("profile", "roce-lossless")
    if name not in PROFILE_DEFAULTS:
        raise BadInput(f"unknown QoS profile {name!r}", field="qos.profile", allowed=list(PROFILES))
    defaults = PROFILE_DEFAULTS[name]
    unknown = sorted(set(qos) - set(defaults) - {"profile"})
    if unknown:
        raise BadInput(
            f"qos.{unknown[0]} is not a parameter of profile {name}",
            field=f"qos.{unknown[0]}",
            allowed=sorted(defaults),
        )
    p = {**defaults, **{k: v for k, v in qos.items() if k != "profile"}}
    mtu = _opt_int(p, "mtu", MTU_MIN, MTU_MAX)
    sysctls: dict[str, str] = {}
    tcp_ecn = _opt_int(p, "tcp_ecn", 0, 2)
    if tcp_ecn is not None:
        sysctls["net.ipv4.tcp_ecn"] = str(tcp_ecn)
    cc = _cc_name(p, "congestion_control")
    if cc is not None:
        sysctls["net.ipv4.tcp_congestion_control"] = cc
    route_cc = _cc_name(p, "route_congestion_control")
    route_ecn = p.get("route_ecn", False)
    if not isinstance(route_ecn, bool):
        raise BadInput("qos.route_ecn must be true or false", field="qos.route_ecn", allowed=[True, False])
    qdisc = p.get("qdisc")
    if qdisc is not None and (not isinstance(qdisc, str) or not qdisc.replace("_", "").isalnum()):
        raise BadInput("qos.qdisc must name a queueing discipline (e.g. fq_codel, mq)", field="qos.qdisc")
    storage_dscp = _opt_int(p, "storage_dscp", 0, 63)
    ports = p.get("storage_ports") or []
    if not isinstance(ports, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 65535 for x in ports
    ):
        raise BadInput(
            "qos.storage_ports must be a list of TCP ports 1-65535",
            field="qos.storage_ports",
            allowed="1-65535",
        )
    if storage_dscp is not None and not ports:
        storage_dscp = None  # nothing to mark
    dcb = None
    roce_tos = None
    ecn_prios: tuple[int, ...] = ()
    knobs: tuple[str, ...] = ()
    if name == "roce-lossless":
        dcb, roce_tos, ecn_prios = _resolve_roce(p)
        if not isinstance(p["manage_dcb"], bool):
            raise BadInput(
                "qos.manage_dcb must be true or false", field="qos.manage_dcb", allowed=[True, False]
            )
        if not p["manage_dcb"]:
            dcb = None
        knobs_val = p["ecn_knobs"]
        if not isinstance(knobs_val, list) or not all(isinstance(k, str) for k in knobs_val):
            raise BadInput("qos.ecn_knobs must be a list of path templates", field="qos.ecn_knobs")
        knobs = tuple(knobs_val)
    return QosSettings(
        profile=name,
        mtu=mtu,
        dcb=dcb,
        roce_tos=roce_tos,
        ecn_priorities=ecn_prios,
        ecn_knobs=knobs,
        sysctls=sysctls,
        route_congestion_control=route_cc,
        route_ecn=route_ecn,
        qdisc=qdisc,
        storage_dscp=storage_dscp,
        storage_ports=tuple(sorted(set(ports))),
        params=p,
    )


def _resolve_roce(p: dict[str, Any]) -> tuple[DcbSettings, int, tuple[int, ...]]:
    roce_prio = _int(p, "roce_priority", 0, 7)
    cnp_prio = _int(p, "cnp_priority", 0, 7)
    roce_dscp = _int(p, "roce_dscp", 0, 63)
    cnp_dscp = _int(p, "cnp_dscp", 0, 63)
    if roce_prio == cnp_prio:
        raise BadInput(
            "qos.cnp_priority must differ from qos.roce_priority: CNPs need their own strict class",
            field="qos.cnp_priority",
        )
    if roce_dscp == cnp_dscp:
        raise BadInput("qos.cnp_dscp must differ from qos.roce_dscp", field="qos.cnp_dscp")
    roce_share = _int(p, "roce_share", 0, 100)
    default_share = _int(p, "default_share", 0, 100)
    if roce_share + default_share != 100:
        raise BadInput(
            f"ETS shares must sum to 100: roce_share {roce_share} + default_share "
            f"{default_share} = {roce_share + default_share}",
            field="qos.roce_share",
            allowed="roce_share + default_share = 100",
        )
    pfc = (roce_prio,) if p.get("pfc_priorities") is None else _priorities(p, "pfc_priorities")
    if cnp_prio in pfc:
        raise BadInput("qos.pfc_priorities must not include the CNP priority", field="qos.pfc_priorities")
    tos = p.get("roce_tos")
    roce_tos = roce_dscp << 2 | ECT0 if tos is None else _int(p, "roce_tos", 0, 255)
    # Traffic class = priority for the two special classes, TC 0 for everything else.
    prio_tc = tuple(roce_prio if i == roce_prio else cnp_prio if i == cnp_prio else 0 for i in range(8))
    tsa = tuple("strict" if tc == cnp_prio else "ets" for tc in range(8))
    bw = tuple(roce_share if tc == roce_prio else default_share if tc == 0 else 0 for tc in range(8))
    if roce_prio == 0:
        raise BadInput(
            "qos.roce_priority 0 is the default class; use 1-7 so RoCE gets its own class",
            field="qos.roce_priority",
            allowed="1-7",
        )
    if cnp_prio == 0:
        raise BadInput(
            "qos.cnp_priority 0 is the default class; use 1-7", field="qos.cnp_priority", allowed="1-7"
        )
    dcb = DcbSettings(
        prio_tc=prio_tc,
        tc_tsa=tsa,
        tc_bw=bw,
        pfc_enabled=pfc,
        dscp_prio=((roce_dscp, roce_prio), (cnp_dscp, cnp_prio)),
        dcbx=_choice(p, "dcbx", DCBX_MODES),
        trust=_choice(p, "trust", TRUST_MODES),
    )
    return dcb, roce_tos, (roce_prio,)
