"""Every command the cluster map applies, listed once: its name, version, owner and purpose.

A map command travels in a Raft entry as msgpack `{"cmd": name, "v": version, "args": {...}}`
(nodeos/cluster/map.py, `encode_command`). This table is what a node knows: `ClusterMap.apply`
looks every committed command up here first. A command whose name this node does not know, or
whose version (or feature level) is newer than any it knows, is never skipped: the map stops
applying at that entry and the node says which release it needs (nodeos/cluster/features.py),
because skipping it while newer members apply it would make the maps differ. Arguments a node
knows but finds wrong are refused with `bad_input` the same on every node, recorded in the map's
`rejected` list, and change nothing else (docs/api.md, "Compatibility").

The handlers that apply the commands live beside the state they change (`owner`); map.py
gathers them in `HANDLERS`, and `check_handlers` (run when map.py is imported, and by
tests/unit/cluster/test_commands.py) refuses a table that differs from this list, so a command
cannot be added, removed or versioned in one place only.

Each command (each version) carries `level`, the cluster feature level that introduced it
(features.LEVELS names the first release of each). The leader never proposes a command above
the cluster's level, and the level rises only once every member knows it: so a new command is
used only when every member runs a release that knows it.

Changing a command: an added optional argument keeps the version (an older node ignores it); a
changed meaning, or an argument a node must not ignore, is a new version (a new `MapCommand` with
the next version, its own handler and the next feature level). A new command also takes the
next level.

Each version names its typed arguments (`args`, a record in nodeos/cluster/command_args.py or
command_args_storage.py). They are checked strictly when the command is proposed (`check_args`:
the daemon's driver refuses, before Raft, arguments that break the record, naming the field) and
observed when it is applied (`nonconforming`: the map counts, never refuses, a committed entry
whose arguments break it, because what a released version's handler accepts at apply is frozen:
an older release applying the same log must reach the same map). A new record is never stricter
at apply than its handler; a stricter rule for arguments already in logs is a new version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeos.cluster import command_args as c
from nodeos.cluster import command_args_storage as s
from nodeos.errors import BadInput

Handler = Callable[[dict[str, Any], dict[str, Any]], Any]


@dataclass(frozen=True)
class MapCommand:
    """One version of one map command. `owner`: the module whose handler applies it; `level`:
    the cluster feature level that introduced it (nodeos/cluster/features.py); `args`: the
    record of its arguments (nodeos/cluster/command_args.py)."""

    name: str
    version: int
    owner: str
    summary: str
    level: int = 1
    args: type[c.Args] = c.Args


_MAP = "nodeos.cluster.map"
_STORAGE = "nodeos.storage.storage_map"
_HOSTS = "nodeos.storage.host_map"
_SNAPS = "nodeos.storage.snapshot_map"
_PUBLISH = "nodeos.storage.publish_map"
_FAILOVER = "nodeos.storage.failover_handlers"
_FEATURES = "nodeos.cluster.feature_map"
_CREATE = "nodeos.storage.create_replace_map"
_UPGRADE = "nodeos.cluster.upgrade_map"

COMMANDS: tuple[MapCommand, ...] = (
    # membership and cluster-wide settings
    MapCommand(
        "init_cluster", 1, _MAP, "name the cluster (its id) and the CA's first holder", args=c.InitCluster
    ),
    MapCommand(
        "add_node", 1, _MAP, "a member joins: id, name, addresses, failure domain, role", args=c.AddNode
    ),
    MapCommand("remove_node", 1, _MAP, "a member leaves (refused while it holds pools)", args=c.RemoveNode),
    MapCommand("node_update", 1, _MAP, "a member's new addresses", args=c.NodeUpdate),
    MapCommand(
        "set_failure_domain", 1, _MAP, "move a member to another failure domain", args=c.SetFailureDomain
    ),
    MapCommand(
        "cluster_set",
        1,
        "nodeos.cluster.voters",
        "the voter count and when a voter is lost",
        args=c.ClusterSet,
    ),
    MapCommand(
        "use_join_token", 1, "nodeos.cluster.token_map", "count one use of a join token", args=c.UseJoinToken
    ),
    MapCommand("secret_roll", 1, _MAP, "one step of a cluster secret roll (generation, phase)", args=c.Roll),
    MapCommand(
        "ca_roll", 1, _MAP, "one step of a cluster CA roll (generation, phase, holder)", args=c.CaRoll
    ),
    MapCommand(
        "set_feature_level",
        1,
        _FEATURES,
        "raise the cluster's feature level",
        level=2,
        args=c.SetFeatureLevel,
    ),
    # the key/value space (tests, operators)
    MapCommand("kv_put", 1, _MAP, "set a key", args=c.KvPut),
    MapCommand("kv_cas", 1, _MAP, "set a key if its value is the one expected", args=c.KvCas),
    MapCommand("kv_get", 1, _MAP, "read a key through the log", args=c.KvKey),
    MapCommand("kv_delete", 1, _MAP, "remove a key", level=2, args=c.KvKey),
    # nodes' storage, pools and volumes
    MapCommand("node_label", 1, _STORAGE, "set or remove a node's labels", args=s.NodeLabel),
    MapCommand("node_set_state", 1, _STORAGE, "a node's state (active, draining, ...)", args=s.NodeSetState),
    MapCommand("node_report", 1, _STORAGE, "what a node's agent really holds", args=s.NodeReport),
    MapCommand("pool_create", 1, _STORAGE, "a pool on a node's drives", args=s.PoolCreate),
    MapCommand("pool_delete", 1, _STORAGE, "delete an empty pool", args=s.PoolDelete),
    MapCommand(
        "volume_create", 1, _STORAGE, "a volume with the leader's placement, re-checked", args=s.VolumeCreate
    ),
    MapCommand("volume_delete", 1, _STORAGE, "mark a volume deleting", args=s.ByName),
    MapCommand("volume_resize", 1, _STORAGE, "grow a volume", args=s.VolumeResize),
    MapCommand(
        "import_node", 1, "nodeos.storage.storage_import", "adopt what a node held before", args=s.ImportNode
    ),
    # hosts and grants
    MapCommand("volume_hosts", 1, _HOSTS, "grant or revoke a host on a volume", args=s.Grant),
    MapCommand("host_add", 1, _HOSTS, "register a host (or several without secrets)", args=s.HostAddV1),
    MapCommand("host_add", 2, _HOSTS, "register a host with TLS (policy and sealed key)", args=s.HostAddV2),
    MapCommand(
        "host_add", 3, _HOSTS, "register a host with TLS and its PSK derivation", level=2, args=s.HostAddV3
    ),
    MapCommand("host_update", 1, _HOSTS, "a host's TLS policy and sealed key", args=s.HostUpdateV1),
    MapCommand(
        "host_update",
        2,
        _HOSTS,
        "a host's TLS policy, sealed key and PSK derivation",
        level=2,
        args=s.HostUpdateV2,
    ),
    MapCommand("host_remove", 1, _HOSTS, "unregister a host", args=s.HostRemove),
    MapCommand("host_seal", 1, _HOSTS, "hosts' plain-text secrets replaced by sealed ones", args=s.HostSeal),
    # snapshots and published volumes
    MapCommand("snapshot_create", 1, _SNAPS, "a snapshot of a ready volume", args=s.SnapshotCreate),
    MapCommand("snapshot_delete", 1, _SNAPS, "delete a snapshot", args=s.SnapshotDelete),
    MapCommand("snapshot_abort", 1, _SNAPS, "give up a snapshot whose freeze lasted too long", args=s.ByUuid),
    MapCommand(
        "volume_publish", 1, _PUBLISH, "publish a volume or snapshot under a name", args=s.VolumePublish
    ),
    MapCommand("volume_unpublish", 1, _PUBLISH, "withdraw a published volume", args=s.VolumeUnpublish),
    MapCommand("publish_hosts", 1, _PUBLISH, "grant or revoke a host on a published volume", args=s.Grant),
    MapCommand(
        "publish_replace",
        1,
        _PUBLISH,
        "a published copy on a down node, made elsewhere",
        level=4,
        args=s.SlotMove,
    ),
    # failover, rebuild and replacement
    MapCommand("node_health", 1, _FAILOVER, "a node's health as the leader sees it", args=s.NodeHealth),
    MapCommand(
        "node_rebuild_limit", 1, _FAILOVER, "cap a node's mirror rebuilds (MB/s)", args=s.NodeRebuildLimit
    ),
    MapCommand(
        "volume_failover",
        1,
        _FAILOVER,
        "make another replica the primary, at an epoch",
        args=s.VolumeFailover,
    ),
    MapCommand(
        "volume_failover",
        2,
        _FAILOVER,
        "make another replica the primary, at an epoch; a planned move only while the old primary "
        "reports it handed off",
        level=7,
        args=s.VolumeFailover,
    ),
    MapCommand(
        "volume_handoff", 1, _FAILOVER, "a planned move: the primary stops serving", args=s.VolumeHandoff
    ),
    MapCommand(
        "volume_replace_replica",
        1,
        "nodeos.storage.replace_map",
        "move a replica elsewhere",
        args=s.ReplaceReplica,
    ),
    MapCommand(
        "volume_create_replace",
        1,
        _CREATE,
        "a new volume's failed replica, made elsewhere",
        level=3,
        args=s.CreateReplace,
    ),
    MapCommand(
        "volume_create_fail", 1, _CREATE, "fail a new volume no other node can take", level=3, args=s.ByUuid
    ),
    # the rolling cluster upgrade (nodeos/update/rolling.py decides, the leader proposes)
    MapCommand(
        "upgrade_start",
        1,
        _UPGRADE,
        "start a rolling upgrade: version, bundle, domains",
        level=5,
        args=c.UpgradeStart,
    ),
    MapCommand(
        "upgrade_step", 1, _UPGRADE, "the upgrade's next step (compare-and-set)", level=5, args=c.UpgradeStep
    ),
    MapCommand(
        "upgrade_step",
        2,
        "nodeos.storage.upgrade_release",
        "the upgrade's next step, with `release` (the domain's replicas released for its update)",
        level=6,
        args=c.UpgradeStep,
    ),
    MapCommand(
        "upgrade_state",
        1,
        _UPGRADE,
        "pause, resume, stop, abort or finish the upgrade",
        level=5,
        args=c.UpgradeState,
    ),
    # the event log
    MapCommand(
        "record_event",
        1,
        "nodeos.cluster.events",
        "append one event to the cluster's log",
        args=c.RecordEvent,
    ),
)


def _index(commands: tuple[MapCommand, ...]) -> dict[str, dict[int, MapCommand]]:
    out: dict[str, dict[int, MapCommand]] = {}
    for mc in commands:
        if mc.version in out.setdefault(mc.name, {}):
            raise RuntimeError(f"map command {mc.name} version {mc.version} is listed twice")
        out[mc.name][mc.version] = mc
    return out


BY_NAME: dict[str, dict[int, MapCommand]] = _index(COMMANDS)
NAMES: list[str] = sorted(BY_NAME)


def lookup(name: str, version: int) -> MapCommand:
    """The command `name` at `version`; BadInput (field `cmd` or `v`) if this node does not know it."""
    versions = BY_NAME.get(name)
    if versions is None:
        raise BadInput(f"unknown command {name!r}", field="cmd", allowed=list(NAMES))
    spec = versions.get(version)
    if spec is None:
        raise BadInput(f"command {name} has no version {version}", field="v", allowed=sorted(versions))
    return spec


def check_args(name: str, version: int, args: Any) -> c.Args:
    """The arguments of a command about to be proposed, decoded by its record; BadInput naming
    the field (or `cmd` / `v` for a command this node does not know) if they break it."""
    return c.check(name, version, lookup(name, version).args, args)


def nonconforming(spec: MapCommand, args: Any) -> str | None:
    """What breaks `spec`'s record in the arguments of a committed entry (None: nothing). The
    map observes it; the handler alone decides what is applied (see the module's docstring)."""
    return c.conforms(spec.args, args)


def disagreements(handlers: Mapping[str, Mapping[int, Handler]]) -> list[str]:
    """How a table of handlers (name -> version -> function) differs from the list (empty: not)."""
    listed = {(mc.name, mc.version) for mc in COMMANDS}
    handled = {(name, v) for name, versions in handlers.items() for v in versions}
    out = [f"{n} v{v} has a handler but is not listed" for n, v in sorted(handled - listed)]
    out += [f"{n} v{v} is listed but has no handler" for n, v in sorted(listed - handled)]
    return out


def check_handlers(handlers: Mapping[str, Mapping[int, Handler]]) -> None:
    problems = disagreements(handlers)
    if problems:
        raise RuntimeError("map commands and their handlers disagree: " + "; ".join(problems))
