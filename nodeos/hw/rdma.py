"""RDMA devices and ports: pyverbs when importable, else /sys/class/infiniband.

Pure parsers for the sysfs texts ("4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SYSFS_IB = Path("/sys/class/infiniband")
# ibv_port_state
_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
_LINK_LAYERS = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}
_MTU = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: int
    state: str  # ACTIVE, DOWN, ...
    link_layer: str  # Ethernet (RoCE) or InfiniBand
    netdev: str | None = None
    rate: str | None = None
    active_mtu: int | None = None

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


def parse_state(text: str) -> str:
    """'4: ACTIVE' -> 'ACTIVE'."""
    t = text.strip()
    m = re.match(r"^\s*(\d+)\s*:\s*(\S+)", t)
    if m:
        return m.group(2).upper()
    return t.upper() or "UNKNOWN"


def parse_rate(text: str) -> str | None:
    t = text.strip()
    return t or None


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""


def from_sysfs(root: Path = SYSFS_IB) -> list[RdmaPort]:
    out = []
    try:
        devs = sorted(os.listdir(root))
    except OSError:
        return out
    for dev in devs:
        for port in sorted(os.listdir(root / dev / "ports")) if (root / dev / "ports").is_dir() else []:
            if not port.isdigit():
                continue
            pdir = root / dev / "ports" / port
            ndevs = pdir / "gid_attrs" / "ndevs"
            netdev = _read(ndevs / "0").strip() or None if ndevs.is_dir() else None
            out.append(
                RdmaPort(
                    device=dev,
                    port=int(port),
                    state=parse_state(_read(pdir / "state")),
                    link_layer=_read(pdir / "link_layer").strip() or "Unspecified",
                    netdev=netdev,
                    rate=parse_rate(_read(pdir / "rate")),
                )
            )
    return out


def from_pyverbs() -> list[RdmaPort] | None:
    """None when pyverbs is not importable."""
    try:
        import pyverbs.device as vd  # type: ignore[import-not-found]
    except ImportError:
        return None
    out = []
    for d in vd.get_device_list():
        name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
        try:
            with vd.Context(name=name) as ctx:
                attr = ctx.query_device()
                for p in range(1, attr.phys_port_cnt + 1):
                    pa = ctx.query_port(p)
                    out.append(
                        RdmaPort(
                            device=name,
                            port=p,
                            state=_PORT_STATES.get(pa.state, str(pa.state)),
                            link_layer=_LINK_LAYERS.get(pa.link_layer, str(pa.link_layer)),
                            active_mtu=_MTU.get(pa.active_mtu),
                        )
                    )
        except Exception:  # pyverbs raises PyverbsRDMAError & co; fall back on sysfs for this device
            out.extend(p for p in from_sysfs() if p.device == name)
    # pyverbs does not name the netdev; sysfs does.
    nd = {(p.device, p.port): (p.netdev, p.rate) for p in from_sysfs()}
    return [
        RdmaPort(
            p.device,
            p.port,
            p.state,
            p.link_layer,
            *nd.get((p.device, p.port), (None, None)),
            active_mtu=p.active_mtu,
        )
        for p in out
    ]


def inventory() -> tuple[str, list[RdmaPort]]:
    """(source, ports): source is 'pyverbs' or 'sysfs'."""
    ports = from_pyverbs()
    if ports is not None:
        return "pyverbs", ports
    return "sysfs", from_sysfs()
