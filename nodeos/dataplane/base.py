"""The data plane interface: one contract, two backends (spdk, kernel).

The daemon's reconciler holds the desired state (pools, volumes, exports) and calls these
methods to make the data plane match it. Every method is idempotent: creating what exists
with the same parameters succeeds and changes nothing; deleting what is absent succeeds.
Methods are blocking (configfs writes, LVM commands, JSON-RPC calls); the daemon runs
them in a single worker thread so data plane changes are serialized.

Names: pools and volumes are addressed by the daemon's ids (`pool_id`, `vol_id`: short
safe strings such as uuid hex), never by user names, so a rename never touches the data
plane and names stay valid for LVM, SPDK and configfs alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

Transport = Literal["tcp", "rdma"]
AnaState = Literal["optimized", "non-optimized", "inaccessible", "persistent-loss", "change"]


@dataclass(frozen=True)
class PoolInfo:
    pool_id: str
    size_bytes: int
    free_bytes: int
    devices: tuple[str, ...]  # block devices or bdevs the pool spans


@dataclass(frozen=True)
class VolumeInfo:
    pool_id: str
    vol_id: str
    size_bytes: int
    kind: Literal["volume", "snapshot", "clone"]
    origin: str | None = None  # snapshot id for clones, volume id for snapshots
    device: str | None = None  # block device path (kernel) or bdev name (spdk)


@dataclass(frozen=True)
class Listener:
    trtype: Transport
    traddr: str
    trsvcid: str = "4420"
    adrfam: Literal["ipv4", "ipv6"] = "ipv4"


@dataclass(frozen=True)
class HostAccess:
    host_nqn: str
    dhchap_key: str | None = None  # DH-HMAC-CHAP secret (DHHC-1:...); never logged


@dataclass(frozen=True)
class ExportSpec:
    """Desired state of one subsystem exporting one volume as namespace 1."""

    nqn: str
    serial: str
    pool_id: str
    vol_id: str
    uuid: str  # namespace UUID, identical on every path/replica
    nguid: str  # 32 hex digits, identical on every path/replica
    listeners: tuple[Listener, ...]
    hosts: tuple[HostAccess, ...] = ()  # empty: no host may connect
    ana_group: int = 1
    ana_state: AnaState = "optimized"
    cntlid_min: int = 1
    cntlid_max: int = 0xFFEF
    qos_iops: int | None = None
    qos_mbps: int | None = None


@dataclass(frozen=True)
class ExportInfo:
    """Actual state of one subsystem as read back from the data plane."""

    nqn: str
    pool_id: str | None
    vol_id: str | None
    listeners: tuple[Listener, ...]
    hosts: tuple[str, ...]
    ana_state: str | None = None
    connected_hosts: tuple[str, ...] = field(default=())


class DataPlane(Protocol):
    name: str  # "kernel" | "spdk" | "none"

    def describe(self) -> dict[str, object]:
        """Backend name, version and capabilities (e.g. {"qos": False, "transports": [...]})."""
        ...

    # pools
    def create_pool(self, pool_id: str, devices: list[str]) -> PoolInfo: ...
    def delete_pool(self, pool_id: str) -> None: ...
    def list_pools(self) -> list[PoolInfo]: ...

    # volumes, snapshots, clones (thin)
    def create_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo: ...
    def resize_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo: ...
    def delete_volume(self, pool_id: str, vol_id: str) -> None: ...
    def snapshot_volume(self, pool_id: str, vol_id: str, snap_id: str) -> VolumeInfo: ...
    def clone_snapshot(self, pool_id: str, snap_id: str, new_vol_id: str) -> VolumeInfo: ...
    def list_volumes(self, pool_id: str | None = None) -> list[VolumeInfo]: ...

    # exports
    def apply_export(self, spec: ExportSpec) -> ExportInfo:
        """Create or update the subsystem, namespace, listeners, allowed hosts and ANA
        state to match `spec`; hosts no longer listed lose access (and are disconnected)."""
        ...

    def remove_export(self, nqn: str) -> None: ...
    def list_exports(self) -> list[ExportInfo]: ...

    def export_info(self, nqn: str) -> ExportInfo | None:
        """One export by NQN, None when absent; no scan of every subsystem (scale)."""
        ...

    def set_ana_state(self, nqn: str, ana_group: int, state: AnaState) -> None: ...
