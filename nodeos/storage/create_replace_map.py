"""A create that failed on one node goes on elsewhere (pure map side; feature level 3).

A node can fail to make its replica of a new volume for reasons of its own: its drive was pulled
a moment before the leader placed the volume there, before its report said so ("no pool"), an
LV create failed. Before level 3 the whole volume failed on the spot, for good, though other
nodes could hold it. From level 3 on (and for volumes, not clones: a clone lives where its
snapshot's blocks are):

- the node's failure is noted in the volume (`create_failed`: node and error, once each, with a
  `replica_create_failed` event) and the volume stays `creating`;
- the leader (nodeos/storage/create_replace.py) gives the slot to another node (so too the slot
  of a node that went down: it is noted then, and not tried again for this volume),
  `volume_create_replace`: never a node that failed it before, nor one of the other slots'
  failure domains; the primary's slot moves with the primary role and a new epoch (secondaries
  that exported to the old primary retarget, as after a failover);
- when no node is left, `volume_create_fail` fails the volume with every node's error and why
  nothing else could take it: the console's create reports that, as before.

Safe because a creating volume holds no data: it never turned ready, so no host wrote to it.
The failed node's own leftovers (if any) are not in the placement any more: its agent deletes
them (nodeos/agent/plan.py, step 1) and its orphan collection whatever a crash left.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.cluster import features
from nodeos.errors import OperationFailed
from nodeos.storage.capacity import check_room
from nodeos.storage.failover_map import volume_of
from nodeos.storage.lookup import health_of
from nodeos.storage.map_common import check_placement, check_spread, set_paths
from nodeos.storage.replace_map import slot_move

LEVEL = 3  # the feature level that brings it (nodeos/cluster/features.py)
MAX_ERROR = 256


def retries_create(st: dict[str, Any], vol: dict[str, Any]) -> bool:
    """A node's failure to make its replica of `vol` re-places the slot instead of failing it."""
    return features.cluster_level(st) >= LEVEL and vol.get("kind") != "clone"


def _name(st: dict[str, Any], nid: int) -> str:
    return str((st["nodes"].get(nid) or {}).get("name") or f"node-{nid}")


def failed_nodes(vol: dict[str, Any]) -> set[int]:
    return {int(f["node"]) for f in vol.get("create_failed") or ()}


def note_create_failures(
    st: dict[str, Any], vol: dict[str, Any], failed: list[tuple[int, dict[str, Any]]]
) -> None:
    """Record each node newly failing to make its replica of creating volume `vol` (report side)."""
    seen = failed_nodes(vol)
    for nid, view in failed:
        if nid in seen:
            continue
        name = _name(st, nid)
        step = str(view.get("step") or "create")
        error = f"node {name}: {step}: {view.get('error') or 'failed'}"[:MAX_ERROR]
        vol.setdefault("create_failed", []).append({"node": nid, "error": error})
        vol["error"] = error
        map_events.record(
            st,
            "replica_create_failed",
            f"volume {vol['name']}: {error}; the leader places this replica elsewhere"[:512],
            severity="warning",
            volume=vol["uuid"],
            node=nid,
            step=step[:256],
            reason=str(view.get("error") or "failed")[:256],
        )


def _creating(st: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    vol = volume_of(st, args)
    if vol["state"] != "creating":
        raise OperationFailed(f"volume {vol['name']} is {vol['state']}, not creating", field="uuid")
    if not retries_create(st, vol):
        why = "a clone lives where its snapshot is" if vol.get("kind") == "clone" else "below feature level 3"
        raise OperationFailed(f"volume {vol['name']}: {why}", field="uuid")
    return vol


def volume_create_replace_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Give the slot of node `old` (it failed to make its replica) to `node`/`pool_id`."""

    vol = _creating(st, args)
    old, new, pool_id = slot_move(st, args)
    name, failed = vol["name"], failed_nodes(vol)
    if args.get("epoch") != vol["epoch"]:
        decided = repr(args.get("epoch"))[:32]
        msg = f"volume {name} is at epoch {vol['epoch']}, the re-placement was decided at {decided}"
        raise OperationFailed(msg, field="epoch")
    nodes = [int(s["node"]) for s in vol["placement"]]
    if old not in nodes or (old not in failed and health_of(st, old) != "down"):
        msg = f"node {old} holds no failed replica of {name} and is not down"
        raise OperationFailed(msg, field="old", allowed=sorted(failed))
    if new in nodes or new in failed:
        raise OperationFailed(f"node {new} holds a replica of {name} or failed to make one", field="node")
    if health_of(st, new) != "up" or (st["nodes"][new].get("state") or "active") != "active":
        raise OperationFailed(f"node {new} is down or draining", field="node")
    idx = nodes.index(old)
    placement = [dict(s) for s in vol["placement"]]
    placement[idx] = {"node": new, "pool_id": pool_id}
    placement = check_placement(st, placement)
    check_spread(st, placement, vol.get("spread", "node"))
    check_room(st, name, int(vol["size_bytes"]), [placement[idx]])
    why = "create failed" if old in failed else "node down"
    if old not in failed:  # down: never tried again for this volume either
        error = f"node {_name(st, old)} is down"
        vol.setdefault("create_failed", []).append({"node": old, "error": error})
    vol["placement"] = placement
    vol["in_sync"] = [int(s["node"]) for s in placement]  # nothing written yet: every replica is whole
    if vol["primary"] == old:
        vol["primary"] = new
        vol["epoch"] = int(vol["epoch"]) + 1  # the secondaries follow the new primary (retarget)
    set_paths(st, vol)
    map_events.record(
        st,
        "replica_replaced",
        f"volume {name}: node {_name(st, old)} could not make its replica ({why}); it is made on "
        f"node {_name(st, new)} instead",
        severity="warning",
        volume=vol["uuid"],
        node=new,
        epoch=vol["epoch"],
        reason=why,
    )
    return {"uuid": vol["uuid"], "name": name, "old": old, "node": new, "pool_id": pool_id}


def volume_create_fail_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Fail a creating volume a node could not make, once no other node can take its replica."""
    vol = _creating(st, args)
    if not vol.get("create_failed"):
        raise OperationFailed(f"no node failed to make volume {vol['name']}", field="uuid")
    reason = str(args.get("reason") or "no other node can hold the replica")[:MAX_ERROR]
    errors = "; ".join(str(f["error"]) for f in vol["create_failed"])
    vol["state"] = "failed"
    vol["error"] = f"{errors}; {reason}"[:1024]
    last = vol["create_failed"][-1]
    map_events.volume_failed(st, vol, int(last["node"]), {"step": "create", "error": reason})
    return {"uuid": vol["uuid"], "name": vol["name"], "state": "failed"}


HANDLERS = {
    "volume_create_replace": {1: volume_create_replace_v1},
    "volume_create_fail": {1: volume_create_fail_v1},
}
