"""The storage records of the cluster map, typed.

The map is msgpack-safe plain data (it is replicated, snapshotted and compared byte for byte), so
these are TypedDicts: they name the fields a record has without changing what is stored. Fields
that later commands or older releases may leave out are `NotRequired`. The shapes are those the
handlers write (nodeos/storage/storage_map.py, snapshot_map.py, host_map.py, publish_map.py).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

NameKind = Literal["volume", "snapshot", "published"]


class NameRef(TypedDict):
    """`names[name]`: one name space for volumes, snapshots and published volumes."""

    kind: NameKind
    uuid: str


class PlacementSlot(TypedDict):
    """One replica of a volume or snapshot: the node and the pool on it."""

    node: int
    pool_id: str


class Pool(TypedDict):
    """`pools["nid/name"]`."""

    name: str
    node: int
    pool_id: str
    drives: list[str]
    devices: list[str]
    state: str  # creating | ready | deleting | failed
    size_bytes: int
    error: str | None
    created: int
    free_bytes: NotRequired[int]


class Volume(TypedDict):
    """`volumes[uuid]`: desired state written through the leader (placement, primary, epoch,
    grants); what each node reports lives in `reports`, never here."""

    uuid: str
    name: str
    vol_id: str
    nqn: str
    nguid: str
    serial: str
    size_bytes: int
    replicas: int
    spread: str
    placement: list[PlacementSlot]
    primary: int
    epoch: int
    in_sync: list[int]
    state: str  # creating | ready | deleting | failed
    error: str | None
    kind: str
    origin: str | None
    origin_uuid: str | None
    hosts: list[str]
    qos_iops: int | None
    qos_mbps: int | None
    created: int
    freeze: NotRequired[str | None]  # the snapshot being taken of a replicated volume


class Snapshot(TypedDict):
    """`snapshots[uuid]`."""

    uuid: str
    name: str
    snap_id: str
    volume: str  # the origin volume's uuid
    volume_name: str
    size_bytes: int
    placement: list[PlacementSlot]
    primary: int
    epoch: int
    state: str
    phase: str | None  # freezing | taking | None
    error: str | None
    created: int


class Published(TypedDict):
    """`published[uuid]`: a snapshot served read-only, copied to the nodes that serve it."""

    uuid: str
    name: str
    nqn: str
    nguid: str
    serial: str
    size_bytes: int
    snapshot: str
    snapshot_name: str
    source: int
    mirrored: bool
    placement: list[PlacementSlot]
    checksum: str | None
    copy_from: dict[Any, Any]
    mismatched: list[int]
    state: str
    hosts: list[str]
    created: int


class Host(TypedDict):
    """`hosts[nqn]`: a registered host; its TLS fields are added by `host_update`."""

    nqn: str
    dhchap_secret: Any  # sealed secret, or None
    added: Any
