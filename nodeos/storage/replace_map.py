"""Re-placing a replica of a replicated volume (pure map command, registered by nodeos/cluster/map.py).

`volume_replace_replica` gives the slot of a secondary that is lost (its node down past the
grace, its pool or drive failed) or leaving (its node drains) to a new {node, pool_id}. The
leader's controller (nodeos/storage/replace.py) decides it; apply re-checks everything, so a
decision overtaken by another change is refused identically on every node:

- the volume is ready, replicated, at the epoch the decision was taken at, with no snapshot
  freeze or planned move to the old node in progress;
- the old node holds a secondary (never the primary's slot) and is not the last in-sync replica;
- the new node is a member that is up and not draining, holds no replica of the volume yet, and
  its pool is ready; the new placement still spreads over distinct failure domains.

The slot keeps its index (a survivor's record, slot and controller-id range do not change) and
the epoch stays: the epoch orders primaries (an agent whose record is older demotes), the
membership is carried by `placement`. The new replica is not in `in_sync`: it enters once the
primary's mirror reports its leg in sync after the full copy (failover_map.settle_in_sync); the
old one leaves it at once. The old node's agent deletes its replica once the primary dropped the
leg (nodeos/agent/plan.py).
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.errors import BadInput, NotFound, OperationFailed
from nodeos.storage.failover_map import in_sync_of, volume_of
from nodeos.storage.lookup import health_of
from nodeos.storage.map_common import check_placement, check_spread, set_paths


def _refuse(msg: str, field: str, **kw: Any) -> OperationFailed:
    return OperationFailed(msg, field=field, **kw)


def slot_move(st: dict[str, Any], args: dict[str, Any]) -> tuple[int, int, str]:
    """The checked `old` node, new `node` (a member) and its `pool_id` of a decision to move a slot."""
    old, new, pool_id = args.get("old"), args.get("node"), args.get("pool_id")
    if type(old) is not int:
        raise BadInput("old must be a node id", field="old")
    if type(new) is not int or new not in st["nodes"]:
        raise NotFound(f"node {new!r} is not a member", field="node")
    if not isinstance(pool_id, str):
        raise BadInput("pool_id must be a string", field="pool_id")
    return old, new, pool_id


def volume_replace_replica_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Move the replica of volume `uuid` on node `old` to `node`/`pool_id`, decided at `epoch`."""

    vol = volume_of(st, args)
    old, new, pool_id = slot_move(st, args)
    name = vol["name"]
    if int(vol.get("replicas") or 1) <= 1:
        raise _refuse(f"volume {name} has one replica: there is nothing to copy from", "uuid")
    if vol["state"] != "ready":
        raise _refuse(f"volume {name} is {vol['state']}", "uuid")
    if args.get("epoch") != vol["epoch"]:
        msg = (
            f"volume {name} is at epoch {vol['epoch']}, the replacement was decided at {args.get('epoch')!r}"
        )
        raise _refuse(msg, "epoch")
    nodes = [int(s["node"]) for s in vol["placement"]]
    if old not in nodes:
        raise _refuse(f"node {old} holds no replica of {name} (any more)", "old", allowed=nodes)
    if old == vol["primary"]:
        raise _refuse(
            f"node {old} is the primary of {name}: it moves by a failover, not a replacement", "old"
        )
    left = [n for n in in_sync_of(vol) if n != old]
    if not left:
        raise _refuse(f"the replica on node {old} is the last in-sync copy of {name}", "old")
    if vol.get("freeze"):
        raise _refuse(f"a snapshot of {name} is being taken", "uuid")
    ho = vol.get("handoff")
    if ho and ho.get("to") == old:
        raise _refuse(f"the primary of {name} is being handed to node {old}", "old")
    if new in nodes:
        raise _refuse(f"node {new} already holds a replica of {name}", "node")
    if health_of(st, new) != "up" or (st["nodes"][new].get("state") or "active") != "active":
        raise _refuse(f"node {new} is down or draining", "node")
    idx = nodes.index(old)
    placement = [dict(s) for s in vol["placement"]]
    placement[idx] = {"node": new, "pool_id": pool_id}
    placement = check_placement(st, placement)
    if vol.get("kind") != "clone":  # a clone's legs live where its snapshot's are (no spread check)
        check_spread(st, placement, vol.get("spread", "node"))
    vol["placement"] = placement
    vol["in_sync"] = [n for n in (int(s["node"]) for s in placement) if n in set(left)]
    set_paths(st, vol)
    reason = str(args.get("reason") or "")[:256]
    map_events.record(
        st,
        "replica_replaced",
        f"volume {name}: the replica on node {old} is re-placed on node {new} and copied in full ({reason})",
        severity="warning",
        volume=vol["uuid"],
        node=new,
        epoch=vol["epoch"],
        reason=reason,
    )
    return {"uuid": vol["uuid"], "name": name, "old": old, "node": new, "pool_id": pool_id}


HANDLERS = {"volume_replace_replica": {1: volume_replace_replica_v1}}
