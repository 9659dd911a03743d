"""The typed arguments of the storage domain's map commands (nodeos/storage/*_map.py apply them).

One record per command version, named by nodeos/cluster/commands.py; how they are used (strict
when proposed, observed when applied) is said in nodeos/cluster/command_args.py. Nested parts
the handlers check themselves (a report's replicas, a placement's slots) are typed as maps and
lists only: their shape belongs to the handler, which checks it at apply.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from nodeos.cluster.command_args import Args, NodeId, bad

Report = dict[str, dict[str, Any]]  # id -> what the agent says of it
Placement = Annotated[list[dict[str, Any]], msgspec.Meta(min_length=1)]


# --- nodes, pools and volumes ---------------------------------------------------------------------


class NodeLabel(Args, kw_only=True):
    node_id: NodeId
    set: dict[str, str] | None = None
    remove: list[str] | None = None


class NodeSetState(Args, kw_only=True):
    node_id: NodeId
    state: str


class NodeReport(Args, kw_only=True):
    """What a node's agent really holds; `seq` orders its reports."""

    node_id: NodeId
    seq: int
    dataplane: dict[str, Any] | None = None
    drives: dict[str, Any] | None = None
    pools: Report | None = None
    replicas: Report | None = None
    snapshots: Report | None = None
    published: Report | None = None
    storage_addresses: list[str] | None = None
    host_nqn: str | None = None


class PoolCreate(Args, kw_only=True):
    node_id: NodeId
    name: str
    pool_id: str
    drives: list[str]
    devices: list[str]


class PoolDelete(Args, kw_only=True):
    node_id: NodeId
    name: str


class VolumeCreate(Args, kw_only=True):
    """The leader's placement (one slot per replica, the primary first), re-checked at apply."""

    name: str
    uuid: str
    nqn: str
    size_bytes: int
    placement: Placement
    kind: str = "volume"
    spread: str = "node"
    origin: str | None = None  # a clone's snapshot
    qos_iops: int | None = None
    qos_mbps: int | None = None

    def __post_init__(self) -> None:
        if self.kind == "clone" and self.origin is None:
            raise bad("origin", "a clone needs its origin snapshot")


class ByName(Args, kw_only=True):
    name: str


class VolumeResize(ByName, kw_only=True):
    size_bytes: int


class ImportNode(Args, kw_only=True):
    """What a node held before the map owned it (storage_import.py)."""

    node_id: NodeId
    hosts: list[dict[str, Any]] | None = None
    pools: list[dict[str, Any]] | None = None
    volumes: list[dict[str, Any]] | None = None
    snapshots: list[dict[str, Any]] | None = None


# --- hosts and grants ---------------------------------------------------------------------------------


class Grant(ByName, kw_only=True):
    """Grant (`add`) or revoke one `host` or several `hosts` on a volume or published volume."""

    add: bool = False
    host: str | None = None
    hosts: list[str] | None = None

    def __post_init__(self) -> None:
        if self.host is None and self.hosts is None:
            raise bad("host", "a grant names a host or hosts")


class HostAddV1(Args, kw_only=True):
    """One host (`nqn`, its DH-HMAC-CHAP secret) or several without secrets (`nqns`)."""

    nqn: str | None = None
    nqns: list[str] | None = None
    dhchap_secret: str | None = None
    added: float | None = None

    def __post_init__(self) -> None:
        if self.nqn is None and self.nqns is None:
            raise bad("nqn", "host_add names a host nqn or nqns")


class HostAddV2(HostAddV1, kw_only=True):
    tls: str | None = None
    tls_key: str | None = None


class HostAddV3(HostAddV2, kw_only=True):
    tls_derivation: str | None = None


class HostUpdateV1(Args, kw_only=True):
    nqn: str
    tls: str | None = None
    tls_key: str | None = None


class HostUpdateV2(HostUpdateV1, kw_only=True):
    tls_derivation: str | None = None


class HostRemove(Args, kw_only=True):
    nqn: str


class SealedHost(Args, kw_only=True):
    nqn: str
    sealed: str
    added: Any = None


class HostSeal(Args, kw_only=True):
    hosts: Annotated[list[SealedHost], msgspec.Meta(min_length=1)]


# --- snapshots and published volumes ----------------------------------------------------------------


class SnapshotCreate(Args, kw_only=True):
    volume: str
    name: str
    uuid: str


class SnapshotDelete(ByName, kw_only=True):
    force: bool = False


class ByUuid(Args, kw_only=True):
    uuid: str
    reason: str | None = None


class VolumePublish(Args, kw_only=True):
    name: str
    uuid: str
    nqn: str
    snapshot: str
    placement: Placement


class VolumeUnpublish(ByName, kw_only=True):
    force: bool = False


class SlotMove(Args, kw_only=True):
    """A leader's decision to move the slot of node `old` to `node`'s pool `pool_id`."""

    uuid: str
    old: int
    node: NodeId
    pool_id: str


# --- failover, rebuild and replacement ------------------------------------------------------------


class NodeHealth(Args, kw_only=True):
    node_id: NodeId
    health: str
    reason: str | None = None


class NodeRebuildLimit(Args, kw_only=True):
    node_id: NodeId
    mbps: Annotated[int, msgspec.Meta(ge=1)] | None = None


class AtEpoch(ByUuid, kw_only=True):
    """A decision taken at the volume's `epoch` (stale, hence refused, once the epoch moved)."""

    epoch: int


class VolumeFailover(AtEpoch, kw_only=True):
    to: NodeId
    planned: bool = False


class VolumeHandoff(AtEpoch, kw_only=True):
    to: NodeId


class ReplaceReplica(SlotMove, kw_only=True):
    epoch: int
    reason: str | None = None


class CreateReplace(SlotMove, kw_only=True):
    epoch: int
