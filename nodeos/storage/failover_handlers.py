"""The failover commands of the cluster map: node health, a node's rebuild cap, and the
ownership changes (failover, planned hand-over). Pure command handlers, registered by
nodeos/cluster/map.py; the in-sync bookkeeping they move is nodeos/storage/failover_map.py's.

A volume's hand-over is checked against the controller's own rule (nodeos/storage/failover.py,
`primary_trouble`), which is why these handlers sit above the decisions and not beside the
in-sync set the decisions read.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.errors import BadInput, NotFound, OperationFailed
from nodeos.storage.failover import primary_trouble
from nodeos.storage.failover_map import (
    HEALTH,
    REBUILD_MBPS_MAX,
    drop_in_sync,
    handed_off,
    in_sync_of,
    volume_at_epoch,
)
from nodeos.storage.lookup import health_of
from nodeos.storage.map_common import set_paths
from nodeos.storage.publish_map import settle_node
from nodeos.storage.replace import troubled_pools
from nodeos.storage.snapshot_map import drop_freezes_of
from nodeos.storage.storage_map import settle_deleting_on


def node_health_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = args.get("node_id")
    if type(nid) is not int or nid not in st["nodes"]:
        raise NotFound(f"node {nid!r} is not a member", field="node_id")
    health = args.get("health")
    if health not in HEALTH:
        raise BadInput(f"health {health!r} is not allowed", field="health", allowed=list(HEALTH))
    node = st["nodes"][nid]
    was = health_of(st, nid)
    if was == health:
        return {"node_id": nid, "health": health, "changed": False}
    node["health"] = health
    reason = str(args.get("reason") or "")[:256]
    name = node.get("name") or f"node-{nid}"
    if health == "down":
        map_events.record(
            st, "node_down", f"node {name} is down: {reason}", severity="critical", node=nid, reason=reason
        )
        for uuid in sorted(st["volumes"]):  # not dict order: every node records the same events
            vol = st["volumes"][uuid]
            if vol["primary"] != nid and any(s["node"] == nid for s in vol["placement"]):
                drop_in_sync(st, vol, nid, "its node is down")
    else:
        map_events.record(st, "node_up", f"node {name} is up again", node=nid)
    settle_node(st, nid)  # published copies: a down node feeds none
    if health == "down":
        settle_deleting_on(st, nid)  # a delete that waited only for this node finishes
    return {"node_id": nid, "health": health, "changed": True}


def volume_failover_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Make `to` the primary of volume `uuid`, decided at epoch `epoch`."""
    return _failover(st, args, volume_at_epoch(st, args))


def volume_failover_v2(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """v1, and a planned move applies only while the old primary's latest report still says it
    stopped serving at this epoch (feature level 7). v1 checked only the map's handoff record: an
    old primary that restarted between the decision and its commit reported again without
    `handed_off` (it may serve again), and the move applied anyway: two primaries (the failover
    simulator, seed 1840). The leader decides again on its next report."""
    vol = volume_at_epoch(st, args)
    if args.get("planned") and not handed_off(st, vol):
        raise OperationFailed(
            f"node {vol['primary']} no longer reports {vol['name']} handed off at epoch {vol['epoch']}",
            field="planned",
        )
    return _failover(st, args, vol)


def _failover(st: dict[str, Any], args: dict[str, Any], vol: dict[str, Any]) -> Any:
    epoch, to = vol["epoch"], args.get("to")
    if vol["state"] in ("deleting", "failed"):
        raise OperationFailed(f"volume {vol['name']} is {vol['state']}", field="uuid")
    cur = in_sync_of(vol)
    if to == vol["primary"] or to not in cur:
        raise OperationFailed(
            f"node {to!r} holds no in-sync replica of {vol['name']} to promote", field="to", allowed=cur
        )
    if health_of(st, to) != "up":
        raise OperationFailed(f"node {to} is down", field="to")
    ho = vol.get("handoff")
    if args.get("planned") and (not ho or ho.get("epoch") != epoch or ho.get("to") != to):
        # The handoff was withdrawn (undrain) and the old primary may serve again.
        raise OperationFailed(f"the planned move of {vol['name']} was withdrawn", field="planned")
    old = vol["primary"]
    vol["primary"] = to
    vol["epoch"] = epoch + 1
    vol["handoff"] = None
    vol["in_sync"] = cur
    drop_in_sync(st, vol, old, "it was the primary before the failover")
    drop_freezes_of(st, vol)
    set_paths(st, vol)
    reason = str(args.get("reason") or "")[:256]
    map_events.record(
        st,
        "failover",
        f"volume {vol['name']}: primary moved from node {old} to node {to}, epoch {vol['epoch']} ({reason})",
        severity="warning",
        volume=vol["uuid"],
        node=to,
        epoch=vol["epoch"],
        reason=reason,
    )
    return {"uuid": vol["uuid"], "name": vol["name"], "primary": to, "epoch": vol["epoch"]}


def volume_handoff_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """A planned move (drain): ask the live primary to stop serving the volume at `epoch`
    (front end inaccessible, writes drained) and say so; `volume_failover` follows once its
    report confirms (`handed_off` == epoch), so two primaries never serve at once."""
    vol = volume_at_epoch(st, args)
    epoch, to = vol["epoch"], args.get("to")
    cur = in_sync_of(vol)
    if to == vol["primary"] or to not in cur or health_of(st, to) != "up":
        raise OperationFailed(f"node {to!r} cannot take over {vol['name']}", field="to", allowed=cur)
    if primary_trouble(st, vol, troubled_pools(st)) is None:
        # Decided before an undrain applied: nothing would ever withdraw it (the undrain
        # withdraws only the hand-overs it finds) nor finish it (the controller moves only
        # primaries in trouble), and the primary would stay fenced for good (the failover
        # simulator, seed 11: a volume unavailable after the heal).
        msg = f"node {vol['primary']} no longer needs to hand {vol['name']} over (not draining, pool sound)"
        raise OperationFailed(msg, field="uuid")
    vol["handoff"] = {"to": to, "epoch": epoch}
    map_events.record(
        st,
        "handoff",
        f"volume {vol['name']}: node {vol['primary']} hands the primary over to node {to} (planned)",
        volume=vol["uuid"],
        node=vol["primary"],
        epoch=epoch,
    )
    return {"uuid": vol["uuid"], "name": vol["name"], "handoff": vol["handoff"]}


def node_rebuild_limit_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Cap a node's mirror rebuilds in MB/s (None: the data plane's default); its agent applies it."""
    nid = args.get("node_id")
    if type(nid) is not int or nid not in st["nodes"]:
        raise NotFound(f"node {nid!r} is not a member", field="node_id")
    mbps = args.get("mbps")
    if mbps is not None and (type(mbps) is not int or not 1 <= mbps <= REBUILD_MBPS_MAX):
        raise BadInput(
            f"rebuild limit {mbps!r} MB/s is out of range",
            field="rebuild_mbps",
            allowed=f"1-{REBUILD_MBPS_MAX}",
        )
    st["nodes"][nid]["rebuild_mbps"] = mbps
    return {"node_id": nid, "rebuild_mbps": mbps}


HANDLERS = {
    "node_rebuild_limit": {1: node_rebuild_limit_v1},
    "node_health": {1: node_health_v1},
    "volume_failover": {1: volume_failover_v1, 2: volume_failover_v2},
    "volume_handoff": {1: volume_handoff_v1},
}
