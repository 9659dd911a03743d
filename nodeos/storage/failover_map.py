"""Failover sections of the cluster map: node health, the in-sync set and ownership changes.

Pure command handlers (registered by nodeos/cluster/map.py) and the in-sync bookkeeping that
storage_map's report settling calls.

- `nodes[nid].health` ("up" | "down", absent = up) is written by the leader's controller
  (nodeos/storage/failover.py): down once the node's lease ran out (it has fenced itself), up
  once it renews again.
- `volumes[uuid].in_sync` lists the nodes whose replica holds every acknowledged write. It
  starts as every placement node (legs are created equal), loses a secondary the primary's
  mirror reports failed or missing and a secondary whose node is down, loses the old primary
  at a failover (its leg may be one write ahead: it is copied in full when it returns), and
  regains a node once the current primary's mirror reports its leg in sync. It is never
  emptied: the last in-sync replica is the only copy known to hold everything.
- `volume_failover` moves a volume's primary to an in-sync replica and bumps its epoch; every
  node's agent follows (nodeos/agent/plan.py: retarget, promote, demote). The command carries
  the epoch it was decided at, so a decision overtaken by another is refused at apply.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.errors import BadInput, NotFound, OperationFailed
from nodeos.storage.lookup import health_of

HEALTH = ("up", "down")
MEMBER_OUT = ("failed", "missing")


def in_sync_of(vol: dict[str, Any]) -> list[int]:
    """The volume's in-sync set; a volume from before the field: every placement node."""
    got = vol.get("in_sync")
    return list(got) if got is not None else [s["node"] for s in vol["placement"]]


def _set_in_sync(vol: dict[str, Any], nodes: list[int]) -> None:
    order = [s["node"] for s in vol["placement"]]
    vol["in_sync"] = [n for n in order if n in set(nodes)]


def _drop_in_sync(st: dict[str, Any], vol: dict[str, Any], nid: int, why: str | None) -> None:
    """`why` None: the report that dropped it is already an event (replica_failed)."""
    cur = in_sync_of(vol)
    if nid not in cur or len(cur) <= 1:
        return  # never empty: the last one is the only copy known to hold every write
    _set_in_sync(vol, [n for n in cur if n != nid])
    if why is None:
        return
    map_events.record(
        st,
        "replica_out_of_sync",
        f"volume {vol['name']}: replica on node {nid} left the in-sync set ({why})",
        severity="warning",
        volume=vol["uuid"],
        node=nid,
        epoch=vol["epoch"],
    )


def settle_in_sync(st: dict[str, Any], vol: dict[str, Any]) -> None:
    """Fold the current primary's mirror report into `in_sync` (storage_map calls it for a
    volume whenever one of its nodes reports). Only a report made at the volume's epoch
    counts: an old primary's late report says nothing about the new mirror."""
    if int(vol.get("replicas") or 1) <= 1 or vol["state"] not in ("ready", "creating"):
        return
    prim = vol["primary"]
    rep = ((st["reports"].get(prim) or {}).get("replicas") or {}).get(vol["uuid"])
    if not rep or rep.get("epoch", vol["epoch"]) != vol["epoch"] or rep.get("state") == "failed":
        return
    members = rep.get("members") or {}
    cur = in_sync_of(vol)
    for slot in vol["placement"]:
        nid = slot["node"]
        state = members.get(nid)
        if nid == prim or state is None:
            continue
        if state == "in-sync" and nid not in cur and health_of(st, nid) == "up":
            _set_in_sync(vol, [*cur, nid])  # the report's own event says so (rebuild_finished)
            cur = in_sync_of(vol)
        elif state in MEMBER_OUT and nid in cur and vol["state"] == "ready":
            _drop_in_sync(st, vol, nid, None)
            cur = in_sync_of(vol)
    if vol.get("in_sync") is None:
        vol["in_sync"] = cur


# --- commands ---------------------------------------------------------------------------------


def volume_of(st: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The volume a leader's decision names by `uuid`."""
    uuid = args.get("uuid")
    vol = st["volumes"].get(uuid) if isinstance(uuid, str) else None
    if vol is None:
        raise NotFound(f"volume {uuid!r} does not exist", field="uuid")
    return vol


def volume_at_epoch(st: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The volume, if the decision was taken at its current epoch (else it is stale)."""
    vol, epoch = volume_of(st, args), args.get("epoch")
    if epoch != vol["epoch"]:
        msg = f"volume {vol['name']} is at epoch {vol['epoch']}, the decision was taken at {epoch!r}"
        raise OperationFailed(msg, field="epoch")
    return vol


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
                _drop_in_sync(st, vol, nid, "its node is down")
    else:
        map_events.record(st, "node_up", f"node {name} is up again", node=nid)
    from nodeos.storage.delete_map import settle_deleting_on
    from nodeos.storage.publish_map import settle_node  # it builds on this module

    settle_node(st, nid)  # published copies: a down node feeds none
    if health == "down":
        settle_deleting_on(st, nid)  # a delete that waited only for this node finishes
    return {"node_id": nid, "health": health, "changed": True}


def volume_failover_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Make `to` the primary of volume `uuid`, decided at epoch `epoch`."""
    from nodeos.storage.snapshot_map import drop_freezes_of
    from nodeos.storage.storage_map import set_paths

    vol = volume_at_epoch(st, args)
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
    _drop_in_sync(st, vol, old, "it was the primary before the failover")
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
    from nodeos.storage.failover import primary_trouble  # it builds on this module
    from nodeos.storage.replace import troubled_pools

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


def handed_off(st: dict[str, Any], vol: dict[str, Any]) -> bool:
    """The primary's own report confirms it stopped serving the volume at its epoch."""
    rep = ((st["reports"].get(vol["primary"]) or {}).get("replicas") or {}).get(vol["uuid"]) or {}
    return rep.get("handed_off") == vol["epoch"]


REBUILD_MBPS_MAX = 100_000


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
    "volume_failover": {1: volume_failover_v1},
    "volume_handoff": {1: volume_handoff_v1},
}
