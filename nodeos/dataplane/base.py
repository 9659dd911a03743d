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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from nodeos.errors import NodeosError
from nodeos.tlskey import TLS_SVCID

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
    tls_key: str | None = None  # TLS PSK (NVMeTLSkey-1:...) for the TLS listeners; never logged
    tls_derivation: str = "standard"  # how the host derives its TLS PSK (nodeos/tlskey.py)


def is_tls(li: Listener) -> bool:
    """A TLS 1.3 listener (TLS required on it): NVMe/TCP on the TLS port. TLS belongs to an
    address and port on both data planes (SPDK's secure_channel, nvmet's addr_tsas), never to
    one subsystem, so the port says it (nodeos/tlskey.py)."""
    return li.trtype == "tcp" and str(li.trsvcid) == TLS_SVCID


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
    # Export this block device instead of the volume's LV: the md mirror on a primary, the
    # linear view of the replica LV on a secondary (pool_id/vol_id still name the volume).
    device: str | None = None
    # False: the subsystem, its hosts and ports stay, its namespace is withheld (hosts see it
    # leave). A secondary's front end while a grow has it smaller than the primary's: a host
    # that took its size from such a path would set the optimized one aside for good.
    ns_enabled: bool = True


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
    device: str | None = None  # the exported block device (LV, md mirror or linear view)
    ana_group: int | None = None


@dataclass(frozen=True)
class NewVolume:
    """A volume to create (create_volumes) and, unless `export` is None, to export."""

    pool_id: str
    vol_id: str
    size_bytes: int
    export: ExportSpec | None = None


@dataclass(frozen=True)
class MadeVolume:
    volume: VolumeInfo
    export: ExportInfo | None  # None: not exported (asked without an export)


@dataclass(frozen=True)
class RemoteSpec:
    """A replica namespace on another node, attached with this node's initiator."""

    nqn: str  # the replica subsystem (nqn.2014-08.io.nodeos:rep:...)
    listener: Listener  # where the replica node listens (storage network)
    host_nqn: str  # this node's initiator identity, the one the replica grants
    host_id: str  # UUID; given with host_nqn always (a lone hostnqn= clashes with an old hostid)
    nguid: str  # the replica namespace's fixed NGUID: the device is found by it, never by name
    keep_alive_tmo: int = 5
    # Never give up and never fail I/O on a lost path: a leg's I/O blocks (nvme requeues it) until
    # the path returns or the primary drops the leg, which it does only once the map no longer
    # counts that replica in sync (nodeos/agent/legwatch.py): md cannot degrade on its own.
    ctrl_loss_tmo: int = -1
    fast_io_fail_tmo: int = -1
    reconnect_delay: int = 2


@dataclass(frozen=True)
class RemoteInfo:
    nqn: str
    listener: Listener | None
    state: str  # the controller's state: live, connecting, resetting, deleting, ...
    device: str | None  # /dev/nvmeXnY of the namespace, when present
    nguid: str | None
    host_nqn: str | None = None


@dataclass(frozen=True)
class MirrorSpec:
    """A raid1 mirror of one volume: members in control-plane order (slot i = members[i])."""

    mirror_id: str  # nodeos-<24 hex of the volume uuid> (nodeos.dataplane.mirror_names)
    members: tuple[str, ...]  # block devices: local LV first by convention, remote namespaces after
    size_bytes: int  # the array (volume) size, identical on every node
    data_offset_bytes: int  # where data starts on every member (superblock and bitmap before it)
    create: bool = False  # True only for brand-new, empty members: mdadm --create --assume-clean
    # A clone's legs are thin clones of its origin's legs and carry the origin's superblock: that
    # one foreign array uuid (the origin's) may be created over, nothing else.
    adopt_uuid: str | None = None


@dataclass(frozen=True)
class MirrorCaps:
    """What a backend's mirrors can do; the node layer (nodeos/node/mirror_ops.py) follows it
    instead of asking which backend it runs on."""

    data_offset_bytes: int  # where data starts on every member: a member is volume size + this
    views: bool  # linear views: a secondary's front end on its replica, failover role changes
    write_freeze: bool  # freeze_mirror_writes: crash-consistent snapshots of replicated volumes
    superblock: bool  # members carry the mirror's metadata (a demoted leg's is wiped)
    grow: bool = False  # grow_mirror / rescan_remote / revalidate_export: replicated volumes grow


# A backend without mirrors: nothing to follow, every mirror call refused (no_mirrors.py).
NO_MIRROR_CAPS = MirrorCaps(data_offset_bytes=0, views=False, write_freeze=False, superblock=False)


MemberStateName = Literal["in_sync", "rebuilding", "faulty", "missing", "spare"]


@dataclass(frozen=True)
class MirrorMember:
    slot: int | None  # raid slot; None for a spare
    device: str | None  # None when the slot's device is missing
    state: MemberStateName
    progress: float | None = None  # 0..1 while rebuilding


@dataclass(frozen=True)
class MirrorInfo:
    mirror_id: str
    device: str  # /dev/md/<mirror_id>
    size_bytes: int
    degraded: bool
    members: tuple[MirrorMember, ...]
    array_state: str  # md's array_state: clean, active, readonly, ...
    sync_action: str  # idle, resync, recover, check, ...
    data_offset_bytes: int | None = None


class DataPlane(Protocol):
    name: str  # "kernel" | "spdk" | "none"
    mirror_caps: MirrorCaps  # what its mirrors can do (data offset, views, freeze)

    def describe(self) -> dict[str, object]:
        """Backend name, version and capabilities (e.g. {"qos": False, "transports": [...]})."""
        ...

    # pools
    def create_pool(self, pool_id: str, devices: list[str]) -> PoolInfo: ...
    def delete_pool(self, pool_id: str) -> None: ...
    def list_pools(self) -> list[PoolInfo]: ...

    # volumes, snapshots, clones (thin)
    def create_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo: ...
    def create_volumes(
        self, wanted: Sequence[NewVolume], made: Callable[[], None] | None = None
    ) -> list[MadeVolume | NodeosError]:
        """Make each volume, call `made()` once they exist (a crash point), then export each that
        has an export; each one's MadeVolume or its error, in order (the others are made
        regardless; a volume whose export failed is left for the caller to undo). A backend may
        send the requests of several volumes together (create_one_by_one: one at a time)."""
        ...

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

    def reapply_exports(self, specs: Sequence[ExportSpec]) -> None:
        """apply_export for each of `specs` (a restart's re-export: no ExportInfo wanted); one
        export's error does not stop the others, the first is raised once all were tried. A
        backend may read what it holds once for all and send the changes together."""
        ...

    def revoke_hosts(self, nqn: str, keep: Sequence[str]) -> list[str]:
        """Only the host side of apply_export, for a revoke: every host export `nqn` allows that
        is not in `keep` loses access and its controllers; nothing else is touched, so it works
        while the volume's device is gone (a pulled drive). The hosts revoked; NotFound when there
        is no such export."""
        ...

    def remove_export(self, nqn: str) -> None: ...
    def list_exports(self) -> list[ExportInfo]:
        """Every export, as the data plane lists them. `ana_state` and `connected_hosts` may be
        left out (None, ()) where they cost a call per export (SPDK): export_info(nqn) has them."""
        ...

    def export_info(self, nqn: str) -> ExportInfo | None:
        """One export by NQN, None when absent; no scan of every subsystem (scale)."""
        ...

    def set_ana_state(self, nqn: str, ana_group: int, state: AnaState) -> None: ...

    def fence_export(self, nqn: str, drop_hosts: bool = False) -> bool:
        """The export's namespace becomes ANA inaccessible on every listener, at once; nothing
        else changes (hosts, listeners, device, the other exports on its ports). Idempotent.
        False when there is no such export. The one fence of a replicated front end: the lease
        keeper's (nodeos/node/service.py), `nodeos-fence` after the daemon stopped and a demote.
        Kernel: the hosts' controllers are dropped on the way in (`drop_hosts`: every time, also
        when the namespace was inaccessible already: a demote cannot tell how it got there)."""
        ...

    # mirrors over the fabric (issue 8); names in nodeos.dataplane.mirror_names
    def attach_remote(self, spec: RemoteSpec) -> str:
        """Connect to a replica subsystem on another node; the local block device of the
        namespace with spec.nguid. Already connected: the same device, nothing changes."""
        ...

    def detach_remote(self, nqn: str) -> None:
        """Drop this node's controllers to a replica subsystem; refused while a mirror uses it."""
        ...

    def list_remotes(self) -> list[RemoteInfo]:
        """Replica connections (NQNs under the replica prefix) of this node's initiator."""
        ...

    def drop_mirror_leg(self, mirror_id: str, nqn: str) -> None:
        """Take the leg of remote `nqn` out of a running mirror even while its I/O blocks: fail it
        in md, then delete its controllers (the blocked I/O fails, md completes the held writes on
        the other legs). Only for a leg the map no longer counts in sync. Absent: nothing."""
        ...

    def cut_mirror_legs(self, mirror_id: str, nqns: Sequence[str]) -> list[str]:
        """Take every leg of `nqns` out of a mirror that is going away, in one round: none
        waits behind another's blocked I/O (drop_mirror_leg for each, at once). The NQNs that
        were attached."""
        ...

    def assemble_mirror(self, spec: MirrorSpec) -> MirrorInfo:
        """Create (spec.create, new empty members only) or assemble the mirror, then bring its
        members to spec.members (re-add returning ones, remove ones no longer listed)."""
        ...

    def stop_mirror(self, mirror_id: str) -> None: ...

    def grow_mirror(self, mirror_id: str, size_bytes: int) -> MirrorInfo:
        """Grow a running mirror to `size_bytes` of data (every leg must have room by then; the
        new space is not resynced: grown thin LVs read zeros on every leg). Idempotent."""
        ...

    def rescan_remote(self, nqn: str, min_bytes: int) -> str:
        """Make this initiator see the namespace of `nqn` at its new size (rescan its controllers)
        and wait until it holds at least `min_bytes`; its device."""
        ...

    def revalidate_export(self, nqn: str) -> None:
        """Tell the hosts of export `nqn` that its namespace changed size (they rescan)."""
        ...

    def prepare_mirror_freeze(self, mirror_id: str) -> None:
        """What freeze_mirror_writes reads and sets up before it holds a write, done ahead, so
        that a freeze right after holds writes for less time. Optional: a freeze does it itself."""
        ...

    def freeze_mirror_writes(self, mirror_id: str) -> None:
        """Block new writes to the whole array once the in-flight ones are done; reads go on.
        When it returns, every acknowledged write is on every in-sync leg. Idempotent."""
        ...

    def thaw_mirror_writes(self, mirror_id: str) -> None: ...

    def read_and_thaw_mirror(self, mirror_id: str) -> MirrorInfo | None:
        """mirror_status read while the writes are still held, then thaw_mirror_writes: a point
        in the hold at which the mirror says which legs hold every acknowledged write."""
        ...

    def mirror_writes_frozen(self, mirror_id: str) -> bool: ...
    def mirror_status(self, mirror_id: str) -> MirrorInfo | None: ...
    def list_mirrors(self) -> list[MirrorInfo]: ...

    def ensure_view(
        self, view_id: str, device: str, offset_bytes: int, size_bytes: int, read_only: bool = False
    ) -> str:
        """(mirror_caps.views) A read-write linear view of `device` from offset_bytes, size_bytes
        long (a secondary exports its replica LV through it: same size and layout as the primary's mirror)."""
        ...

    def remove_view(self, view_id: str) -> None: ...

    def block_view(self, view_id: str, size_bytes: int) -> str:
        """The view keeps existing (and its export) but maps nothing: I/O fails, and the
        device it mapped is released (a failover hands a secondary's LV to md). Without
        mirror_caps.views: a stand-in of size_bytes that only an ANA inaccessible front end may
        export (a secondary's, whose replica LV its replica export holds)."""
        ...

    def wipe_mirror_member(self, device: str) -> None:
        """Zero a stopped leg's md superblock so it only ever comes back by a full copy."""
        ...

    def set_rebuild_limit(self, kib_per_s: int | None) -> None:
        """Cap the node's mirror rebuilds (KiB/s, all arrays together); None: the default."""
        ...

    def set_referrals(self, port: Listener, referrals: tuple[Listener, ...]) -> None:
        """Make `port` a discovery port whose log page refers to exactly `referrals` (the other
        storage nodes' discovery ports)."""
        ...

    def list_referrals(self, port: Listener) -> list[Listener]: ...


def create_one_by_one(
    dp: DataPlane, wanted: Sequence[NewVolume], made: Callable[[], None] | None
) -> list[MadeVolume | NodeosError]:
    """create_volumes where nothing can be sent together: create_volume for each, then
    apply_export for each."""
    vols: list[VolumeInfo | NodeosError] = []
    for w in wanted:
        try:
            vols.append(dp.create_volume(w.pool_id, w.vol_id, w.size_bytes))
        except NodeosError as e:
            vols.append(e)
    if made is not None:
        made()
    out: list[MadeVolume | NodeosError] = []
    for w, v in zip(wanted, vols, strict=True):
        if isinstance(v, NodeosError):
            out.append(v)
            continue
        try:
            out.append(MadeVolume(v, dp.apply_export(w.export) if w.export is not None else None))
        except NodeosError as e:
            out.append(e)
    return out
