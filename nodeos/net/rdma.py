"""RDMA inventory: RDMA devices and ports, mapped to the net devices they ride on.

A profile names net devices once (ens1f0); the RoCE settings (rdma_cm ToS, RDMA
congestion counters) follow through this map. Source: /sys/class/infiniband (every
RDMA driver, including Soft-RoCE rxe), enriched by pyverbs when it is installed.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nodeos.errors import OperationFailed

SYS_IB = Path("/sys/class/infiniband")
RDMA_CM = Path("/sys/kernel/config/rdma_cm")


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str  # "RoCE v2", "IB/RoCE v1"
    netdev: str | None


@dataclass(frozen=True)
class RdmaPort:
    device: str  # e.g. mlx5_0, rxe0
    port: int
    state: str  # ACTIVE, DOWN...
    phys_state: str
    link_layer: str  # Ethernet (RoCE) or InfiniBand
    netdev: str | None
    gids: tuple[Gid, ...] = ()
    roce_versions: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _state(text: str | None) -> str:
    # sysfs writes "4: ACTIVE"; keep the name.
    if not text:
        return "unknown"
    return text.split(":", 1)[-1].strip()


def _gids(port_dir: Path) -> tuple[Gid, ...]:
    out: list[Gid] = []
    gid_dir = port_dir / "gids"
    if not gid_dir.is_dir():
        return ()
    for entry in sorted(gid_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
        gid = _read(entry)
        # Unused table slots read as all zeros (or fail with EINVAL on newer kernels).
        if not gid or set(gid.replace(":", "")) == {"0"}:
            continue
        idx = int(entry.name)
        gtype = _read(port_dir / "gid_attrs" / "types" / entry.name) or ""
        ndev = _read(port_dir / "gid_attrs" / "ndevs" / entry.name)
        out.append(Gid(index=idx, gid=gid, type=gtype, netdev=ndev or None))
    return tuple(out)


def _port_netdev(dev_dir: Path, gids: tuple[Gid, ...]) -> str | None:
    for g in gids:
        if g.netdev:
            return g.netdev
    parent = _read(dev_dir / "parent")  # Soft-RoCE names its lower device here
    if parent:
        return parent
    net_dir = dev_dir / "device" / "net"
    if net_dir.is_dir():
        names = sorted(os.listdir(net_dir))
        if names:
            return names[0]
    return None


def inventory(root: Path = SYS_IB) -> list[RdmaPort]:
    """Every RDMA port of the machine (empty when there is no RDMA device)."""
    if not root.is_dir():
        return []
    ports: list[RdmaPort] = []
    for dev_dir in sorted(root.iterdir()):
        pdir = dev_dir / "ports"
        if not pdir.is_dir():
            continue
        for port_dir in sorted(pdir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            if not port_dir.name.isdigit():
                continue
            gids = _gids(port_dir)
            versions = tuple(sorted({g.type for g in gids if g.type}))
            ports.append(
                RdmaPort(
                    device=dev_dir.name,
                    port=int(port_dir.name),
                    state=_state(_read(port_dir / "state")),
                    phys_state=_state(_read(port_dir / "phys_state")),
                    link_layer=_read(port_dir / "link_layer") or "unknown",
                    netdev=_port_netdev(dev_dir, gids),
                    gids=gids,
                    roce_versions=versions,
                    extra=_pyverbs_port(dev_dir.name, int(port_dir.name)),
                )
            )
    return ports


def _pyverbs_port(device: str, port: int) -> dict[str, Any]:
    """Port attributes from libibverbs when pyverbs is installed (the node's verbs view)."""
    try:
        from pyverbs.device import Context  # type: ignore[import-not-found]
    except ImportError:
        return {}
    try:
        with Context(name=device) as ctx:
            attr = ctx.query_port(port)
            return {"active_mtu": int(attr.active_mtu), "gid_tbl_len": int(attr.gid_tbl_len)}
    except Exception as exc:  # pyverbs raises its own PyverbsRDMAError types
        return {"pyverbs_error": str(exc)}


def by_netdev(ports: list[RdmaPort]) -> dict[str, list[RdmaPort]]:
    out: dict[str, list[RdmaPort]] = {}
    for p in ports:
        if p.netdev:
            out.setdefault(p.netdev, []).append(p)
    return out


# --- rdma_cm default ToS (configfs) ---------------------------------------------------------


def tos_path(device: str, port: int, root: Path = RDMA_CM) -> Path:
    return root / device / "ports" / str(port) / "default_roce_tos"


def read_roce_tos(device: str, port: int, root: Path = RDMA_CM) -> int | None:
    """The ToS rdma_cm puts on new RoCE connections; None when the configfs entry is absent."""
    text = _read(tos_path(device, port, root))
    return int(text) if text is not None and text.isdigit() else None


def write_roce_tos(device: str, port: int, tos: int, root: Path = RDMA_CM) -> None:
    if not root.is_dir():
        raise OperationFailed(
            f"rdma_cm configfs is not available at {root}: mount configfs and load rdma_cm "
            "(modprobe rdma_cm) to set the default RoCE ToS"
        )
    dev_dir = root / device
    # mkdir of the device directory makes rdma_cm populate its ports (configfs semantics).
    dev_dir.mkdir(exist_ok=True)
    path = tos_path(device, port, root)
    try:
        path.write_text(f"{tos}\n")
    except OSError as exc:
        raise OperationFailed(
            f"cannot set default RoCE ToS of {device} port {port}: {exc.strerror}"
        ) from None


# --- RDMA congestion counters -----------------------------------------------------------------

RDMA_CC_COUNTERS = (
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "np_ecn_marked_roce_packets",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "out_of_buffer",
    "implied_nak_seq_err",
)


def read_hw_counters(device: str, port: int, root: Path = SYS_IB) -> dict[str, int]:
    """Port hw_counters (driver specific; absent counters are simply missing)."""
    d = root / device / "ports" / str(port) / "hw_counters"
    out: dict[str, int] = {}
    if not d.is_dir():
        return out
    for name in RDMA_CC_COUNTERS:
        text = _read(d / name)
        if text is not None and text.isdigit():
            out[name] = int(text)
    return out
