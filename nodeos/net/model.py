"""The desired network state of a node: parsed and checked from a TOML file or a map entry.

Everything here is pure; a value that is wrong raises BadInput naming its field before
anything on the machine is touched.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeos.errors import BadInput
from nodeos.net.profiles import MTU_MAX, MTU_MIN, QosSettings, resolve

IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
# Routes we install carry this protocol number so we only ever remove our own.
NODEOS_RTPROTO = 245


@dataclass(frozen=True)
class RouteSpec:
    dst: str  # normalised network, e.g. "198.51.100.0/24"
    gateway: str | None = None
    metric: int | None = None


@dataclass(frozen=True)
class InterfaceSpec:
    name: str
    mtu: int | None
    addresses: tuple[str, ...] | None  # normalised "ip/prefix", sorted; None: left alone
    routes: tuple[RouteSpec, ...] | None = None  # None: left alone
    up: bool = True


@dataclass(frozen=True)
class Management:
    """How to tell the node can still be reached after an apply.

    `interface`: changes on it can cut the node off (confirmation needed).
    `probe`: an address that must answer ICMP echo after the apply, else roll back.
    """

    interface: str | None = None
    probe: str | None = None
    timeout: float = 5.0


@dataclass(frozen=True)
class Thresholds:
    """When counters become alarms (`[watch]` in the config). Parameters, so a site can tune them."""

    pause_frames_per_s: float = 1000.0  # sustained pause frames on one priority
    paused_fraction: float = 0.3  # share of the interval a priority spent paused
    loss_events: int = 1  # any drop on a lossless class is one too many


@dataclass(frozen=True)
class NetConfig:
    interfaces: tuple[InterfaceSpec, ...]
    qos: QosSettings
    management: Management = field(default_factory=Management)
    watch: Thresholds = field(default_factory=Thresholds)

    def interface(self, name: str) -> InterfaceSpec | None:
        return next((i for i in self.interfaces if i.name == name), None)


def _fail(msg: str, fld: str, allowed: Any = None) -> BadInput:
    return BadInput(msg, field=fld, allowed=allowed)


def _table(value: Any, fld: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(f"{fld} must be a table", fld)
    return value


def check_mtu(value: Any, fld: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not MTU_MIN <= value <= MTU_MAX:
        raise _fail(
            f"{fld} must be an integer from {MTU_MIN} to {MTU_MAX}, got {value!r}",
            fld,
            f"{MTU_MIN}-{MTU_MAX}",
        )
    return value


def check_ifname(value: Any, fld: str) -> str:
    if not isinstance(value, str) or not IFNAME_RE.match(value):
        raise _fail(f"{fld} must be an interface name (1-15 characters), got {value!r}", fld)
    return value


def check_address(value: Any, fld: str) -> str:
    try:
        iface = ipaddress.ip_interface(str(value))
    except ValueError:
        raise _fail(
            f"{fld} must be an address with prefix length, e.g. 192.0.2.11/24, got {value!r}", fld
        ) from None
    if not isinstance(value, str) or "/" not in value:
        raise _fail(f"{fld} needs a prefix length, e.g. 192.0.2.11/24", fld)
    return f"{iface.ip}/{iface.network.prefixlen}"


def _route(value: Any, fld: str) -> RouteSpec:
    t = _table(value, fld)
    unknown = sorted(set(t) - {"dst", "gateway", "metric"})
    if unknown:
        raise _fail(
            f"{fld}.{unknown[0]} is not a route key", f"{fld}.{unknown[0]}", ["dst", "gateway", "metric"]
        )
    try:
        dst = str(ipaddress.ip_network(str(t.get("dst")), strict=False))
    except ValueError:
        raise _fail(f"{fld}.dst must be a network, e.g. 198.51.100.0/24", f"{fld}.dst") from None
    gw = t.get("gateway")
    if gw is not None:
        try:
            gw = str(ipaddress.ip_address(str(gw)))
        except ValueError:
            raise _fail(f"{fld}.gateway must be an IP address", f"{fld}.gateway") from None
    metric = t.get("metric")
    if metric is not None and (
        isinstance(metric, bool) or not isinstance(metric, int) or not 0 <= metric < 2**32
    ):
        raise _fail(f"{fld}.metric must be an integer 0-4294967295", f"{fld}.metric")
    return RouteSpec(dst=dst, gateway=gw, metric=metric)


def _interface(value: Any, idx: int, default_mtu: int | None) -> InterfaceSpec:
    fld = f"interfaces[{idx}]"
    t = _table(value, fld)
    allowed = ["name", "mtu", "addresses", "routes", "up"]
    unknown = sorted(set(t) - set(allowed))
    if unknown:
        raise _fail(f"{fld}.{unknown[0]} is not an interface key", f"{fld}.{unknown[0]}", allowed)
    name = check_ifname(t.get("name"), f"{fld}.name")
    mtu = check_mtu(t["mtu"], f"{fld}.mtu") if "mtu" in t else default_mtu
    addrs = t.get("addresses")
    if addrs is not None and not isinstance(addrs, list):
        raise _fail(f"{fld}.addresses must be a list", f"{fld}.addresses")
    norm = (
        None
        if addrs is None
        else tuple(sorted({check_address(a, f"{fld}.addresses[{i}]") for i, a in enumerate(addrs)}))
    )
    routes = t.get("routes")
    if routes is not None and not isinstance(routes, list):
        raise _fail(f"{fld}.routes must be a list of tables", f"{fld}.routes")
    up = t.get("up", True)
    if not isinstance(up, bool):
        raise _fail(f"{fld}.up must be true or false", f"{fld}.up", [True, False])
    rs = None if routes is None else tuple(_route(r, f"{fld}.routes[{i}]") for i, r in enumerate(routes))
    return InterfaceSpec(name=name, mtu=mtu, addresses=norm, routes=rs, up=up)


def _management(value: Any) -> Management:
    t = _table(value, "management")
    allowed = ["interface", "probe", "timeout"]
    unknown = sorted(set(t) - set(allowed))
    if unknown:
        raise _fail(f"management.{unknown[0]} is not a management key", f"management.{unknown[0]}", allowed)
    iface = None if t.get("interface") is None else check_ifname(t["interface"], "management.interface")
    probe = t.get("probe")
    if probe is not None:
        try:
            probe = str(ipaddress.ip_address(str(probe)))
        except ValueError:
            raise _fail("management.probe must be an IP address", "management.probe") from None
    timeout = t.get("timeout", 5.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
        raise _fail("management.timeout must be seconds, 0-300", "management.timeout", "0-300")
    return Management(interface=iface, probe=probe, timeout=float(timeout))


def parse_config(doc: dict[str, Any]) -> NetConfig:
    """Check a config document (TOML already decoded, or a cluster-map entry)."""
    allowed = ["interfaces", "qos", "management", "watch"]
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise _fail(f"{unknown[0]} is not a top-level key of a network config", unknown[0], allowed)
    qos = resolve(_table(doc.get("qos", {}), "qos"))
    ifaces = doc.get("interfaces", [])
    if not isinstance(ifaces, list):
        raise _fail("interfaces must be an array of tables ([[interfaces]])", "interfaces")
    specs = tuple(_interface(v, i, qos.mtu) for i, v in enumerate(ifaces))
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s.name in seen:
            raise _fail(f"interface {s.name} is listed twice", f"interfaces[{i}].name")
        seen.add(s.name)
    mgmt = _management(doc.get("management", {}))
    return NetConfig(interfaces=specs, qos=qos, management=mgmt, watch=_watch(doc.get("watch", {})))


def _watch(value: Any) -> Thresholds:
    t = _table(value, "watch")
    limits = {"pause_frames_per_s": (0.0, 1e9), "paused_fraction": (0.0, 1.0), "loss_events": (1, 10**12)}
    unknown = sorted(set(t) - set(limits))
    if unknown:
        raise _fail(f"watch.{unknown[0]} is not a watch threshold", f"watch.{unknown[0]}", sorted(limits))
    for k, v in t.items():
        lo, hi = limits[k]
        ok_type = isinstance(v, int) if k == "loss_events" else isinstance(v, int | float)
        if isinstance(v, bool) or not ok_type or not lo <= v <= hi:
            raise _fail(
                f"watch.{k} must be a number from {lo} to {hi}, got {v!r}", f"watch.{k}", f"{lo}-{hi}"
            )
    return Thresholds(**t)


def load_config(path: str | Path) -> NetConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise _fail(f"cannot read network config {p}: {exc.strerror}", "--config") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(f"{p} is not valid TOML: {exc}", "--config") from None
    return parse_config(doc)
