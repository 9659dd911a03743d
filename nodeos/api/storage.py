"""Drives, pools and volumes (snapshots, clones, published volumes, grants)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from .fields import Force, HostNqn, HostNqns, Name, NodeRef, PciAddress, Size, Spread, Wait
from .spec import Check, Method, NoParams, Reply, Request

View = dict[str, Any]  # a view of one object, as `--json` prints it
Rows = list[dict[str, Any]]  # rows of a listing

NodeOrHere = Annotated[NodeRef, Meta(description="the node (name or id); default: this node")]
VolumeReplicas = Annotated[
    int,
    Check("nodeos.control.params:replicas_param", with_field=False),
    Meta(ge=1, le=3, description="copies, each on its own failure domain (default 1)"),
]
CloneReplicas = Annotated[
    int,
    Check("nodeos.control.params:replicas_param", with_field=False),
    Meta(ge=1, le=3, description="copies (default: as many as the snapshot has)"),
]
PublishReplicas = Annotated[
    int | str,
    Check("nodeos.storage.publish:parse_replicas"),
    Meta(description="a count, or `all` (default): every failure domain with room"),
]
QosIops = Annotated[
    int, Check("nodeos.validate:qos_iops"), Meta(description="IOPS limit, steps of 1000 (SPDK)")
]
QosMbps = Annotated[
    int, Check("nodeos.validate:qos_mbps"), Meta(description="bandwidth limit in MB/s (SPDK)")
]
Drives = Annotated[
    list[str] | str,
    Check("nodeos.validate:drive_ids"),
    Meta(description="`all`, or drive ids from `nodeos drive list` (a list or comma-separated)"),
]


class DriveAddress(Request):
    address: PciAddress


class PoolCreate(Request):
    name: Name
    drives: Drives
    node: NodeOrHere | None = None
    wait: Wait = 100.0


class PoolDelete(Request):
    name: Name
    node: NodeOrHere | None = None
    wait: Wait = 100.0


class VolumeCreate(Request):
    name: Name
    size: Size
    pool: (
        Annotated[Name, Meta(description="the pool (default: the healthy pool with most free space)")] | None
    ) = None
    replicas: VolumeReplicas | None = None
    spread: Spread | None = None
    qos_iops: QosIops | None = None
    qos_mbps: QosMbps | None = None
    wait: Wait = 100.0


class VolumeName(Request):
    name: Name


class VolumeResize(Request):
    name: Name
    size: Size
    wait: Wait = 100.0


class VolumeDelete(Request):
    name: Name
    force: Force = False
    wait: Wait = 100.0


class VolumeSnapshot(Request):
    name: Name
    snapshot: Annotated[Name, Meta(description="the new snapshot's name")]
    wait: Wait = 100.0


class VolumeClone(Request):
    snapshot: Annotated[Name, Meta(description="the snapshot to clone")]
    name: Annotated[Name, Meta(description="the new volume's name")]
    replicas: CloneReplicas | None = None
    wait: Wait = 100.0


class VolumeHosts(Request):
    """`host` for one, `hosts` for several in one change."""

    name: Name
    host: HostNqn | None = None
    hosts: HostNqns | None = None
    wait: Wait = 100.0


class VolumePublish(Request):
    snapshot: Annotated[Name, Meta(description="the snapshot to publish read-only")]
    name: Annotated[Name, Meta(description="the published volume's name")]
    replicas: PublishReplicas | None = None
    spread: Spread | None = None
    wait: Wait = 100.0


class VolumeUnpublish(Request):
    name: Name
    force: Force = False
    wait: Wait = 100.0


class Deleted(Reply):
    name: str
    deleted: bool
    kind: str  # volume, clone or snapshot


class PoolDeleted(Reply):
    name: str
    node: str
    deleted: bool


class Unpublished(Reply):
    name: str
    unpublished: bool
    kind: str


_NEEDS_STORAGE = ("not_found", "not_supported")

METHODS: tuple[Method, ...] = (
    Method("drive.list", "This node's NVMe drives, kernel- or SPDK-owned.", NoParams, Rows, "node",
           console="drive list"),
    Method("drive.claim", "Hand a drive to SPDK (never the boot drive, one in use or in a pool).",
           DriveAddress, View, "node", write=True, console="drive claim"),
    Method("drive.release", "Give a drive back to the kernel's nvme driver.", DriveAddress, View, "node",
           write=True, console="drive release"),
    Method("pool.create", "Create a pool over whole drives of one node (their contents are lost).",
           PoolCreate, View, "leader", errors=("not_found", "already_exists", "not_supported"), write=True,
           console="pool create"),
    Method("pool.list", "Every pool of the cluster with size and free space.", NoParams, Rows, "leader",
           console="pool list"),
    Method("pool.delete", "Delete an empty pool.", PoolDelete, PoolDeleted, "leader", errors=_NEEDS_STORAGE,
           write=True, console="pool delete"),
    Method("volume.create", "Create a thin volume of 1-3 replicas, granted to no host.", VolumeCreate, View,
           "leader", errors=("already_exists", "not_found", "not_supported", "placement_refused"), write=True,
           console="volume create"),
    Method("volume.list", "Volumes, clones, snapshots and published volumes.", NoParams, Rows, "leader",
           console="volume list"),
    Method("volume.show", "One volume, snapshot or published volume: NQN, replicas, listeners, grants.",
           VolumeName, View, "leader", errors=("not_found",), console="volume show"),
    Method("volume.resize", "Grow a volume (never shrink).", VolumeResize, View, "leader",
           errors=_NEEDS_STORAGE, write=True, console="volume resize"),
    Method("volume.delete", "Delete a volume, clone or snapshot.", VolumeDelete, Deleted, "leader",
           errors=_NEEDS_STORAGE, write=True, console="volume delete"),
    Method("volume.snapshot", "Take a snapshot of a volume.", VolumeSnapshot, View, "leader",
           errors=(*_NEEDS_STORAGE, "already_exists"), write=True, console="volume snapshot"),
    Method("volume.clone", "Create a volume from a snapshot, on the snapshot's nodes.", VolumeClone, View,
           "leader", errors=(*_NEEDS_STORAGE, "already_exists"), write=True, console="volume clone"),
    Method("volume.grant", "Let hosts see and connect to a volume.", VolumeHosts, View, "leader",
           errors=_NEEDS_STORAGE, write=True, console="volume grant"),
    Method("volume.revoke", "Take hosts' access to a volume away.", VolumeHosts, View, "leader",
           errors=_NEEDS_STORAGE, write=True, console="volume revoke"),
    Method("volume.publish", "Publish a snapshot read-only, copied to many nodes (model distribution).",
           VolumePublish, View, "leader", errors=(*_NEEDS_STORAGE, "already_exists"), write=True,
           console="volume publish"),
    Method("volume.unpublish", "Remove a published volume.", VolumeUnpublish, Unpublished, "leader",
           errors=_NEEDS_STORAGE, write=True, console="volume unpublish"),
)  # fmt: skip
