"""Storage sections of the cluster map: node labels and reports, pools, volumes, snapshots,
hosts, grants and path states. Pure command handlers, registered by nodeos/cluster/map.py
(those of hosts and grants are in nodeos/storage/host_map.py).

Desired state (written through the leader: placement, primary, epoch, grants) and actual
state (written by each node's agent in `node_report`) live in separate fields, so neither
overwrites the other. Applying a report is also where the two meet, deterministically: a
volume becomes `ready` once every replica says so, a `deleting` volume or pool is dropped
once no node reports it any more.

Shapes (msgpack-safe; ids are ints, uuids strings):
  nodes[nid]         + labels {k: v}, state active|draining, host_nqn, addresses.storage [addr]
  reports[nid]       {seq, dataplane {name, healthy, error}, drives {id: {...}},
                      pools {pool_id: {size_bytes, free_bytes, state, error}},
                      replicas {vol_uuid: {state, step, error, size_bytes, members {nid: state}}},
                      snapshots {snap_uuid: {state, error}}}
  pools["nid/name"]  {name, node, pool_id, drives, devices, state creating|ready|deleting|failed, error}
  volumes[uuid]      {uuid, name, vol_id, nqn, nguid, serial, size_bytes, replicas, spread,
                      placement [{node, pool_id}], primary, epoch, in_sync [nid],
                      state creating|ready|
                      deleting|failed, error, kind, origin, origin_uuid, hosts [nqn], qos_*,
                      freeze (uuid of the snapshot being taken of a replicated volume, or None)}
  snapshots[uuid]    {uuid, name, snap_id, volume (uuid), volume_name, size_bytes, placement,
                      primary, state, phase freezing|taking|None}   (nodeos/storage/snapshot_map.py)
  names[name]        {"kind": "volume"|"snapshot", "uuid": uuid}   (one name space for both)
  hosts[nqn]         {nqn, dhchap_secret, added}
  paths[uuid]        {nid: ana_state}
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nodeos.cluster import events as map_events
from nodeos.errors import AlreadyExists, BadInput, NotFound, OperationFailed
from nodeos.storage import create_replace_map, failover_map
from nodeos.storage.capacity import check_room
from nodeos.storage.delete_map import left_on_down_nodes, still_holding
from nodeos.storage.lookup import name_free, pool_key, snapshot_by_name, volume_by_name
from nodeos.storage.map_common import check_placement, check_spread, member, replica_view, req, set_paths
from nodeos.storage.publish_map import check_report, settle_node
from nodeos.storage.snapshot_map import drop_freezes_of, settle_snapshot

REPLICA_STATES = ("creating", "syncing", "in-sync", "degraded", "failed")
VOLUME_STATES = ("creating", "ready", "deleting", "failed")
LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._/-]{0,62})$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62})$")
MAX_REPORT_ERROR = 512

SECTIONS = ("reports", "pools", "volumes", "snapshots", "names", "hosts", "paths")


# --- argument helpers ------------------------------------------------------------------------


def _short(s: Any) -> str | None:
    return None if s is None else str(s)[:MAX_REPORT_ERROR]


def check_labels(set_: dict[str, Any], remove: list[Any]) -> None:
    for k, v in set_.items():
        if not isinstance(k, str) or not LABEL_KEY.match(k):
            raise BadInput(
                f"label key {k!r} must be 1-63 lower-case letters, digits, '.', '_', '/', '-'", field="labels"
            )
        if not isinstance(v, str) or not LABEL_VALUE.match(v):
            raise BadInput(
                f"label value {v!r} (key {k}) must be 1-63 letters, digits, '.', '_', '-'", field="labels"
            )
    for k in remove:
        if not isinstance(k, str) or not LABEL_KEY.match(k):
            raise BadInput(f"label key {k!r} is not a valid key", field="labels")


def label_conflicts(set_: dict[str, Any], remove: list[Any]) -> None:
    """One request may not both set and remove a key: which one wins would depend on the order
    it was typed in. Checked where a request comes in, not when a committed command is applied
    (entries already in a log must apply as they did)."""
    both = sorted(k for k in set(remove) if k in set_)
    if both:
        raise BadInput(
            f"label {both[0]!r} is both set and removed in one request: give one change per key",
            field="labels",
            allowed="KEY=VALUE or KEY-, once per key",
        )


# --- nodes -----------------------------------------------------------------------------------


def node_label_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = member(st, args)
    set_ = args.get("set") or {}
    remove = args.get("remove") or []
    if not isinstance(set_, dict) or not isinstance(remove, list):
        raise BadInput("set must be a map and remove a list", field="labels")
    check_labels(set_, remove)
    node = st["nodes"][nid]
    labels = dict(node.get("labels") or {})
    for k in remove:
        labels.pop(k, None)
    labels.update(set_)
    node["labels"] = labels
    return {"node_id": nid, "labels": labels}


def node_set_state_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = member(st, args)
    state = args.get("state")
    if state not in ("active", "draining"):
        raise BadInput(f"state {state!r} is not allowed", field="state", allowed=["active", "draining"])
    st["nodes"][nid]["state"] = state
    if state == "active":
        for vol in st["volumes"].values():  # undrained: planned moves not yet done are withdrawn
            if vol["primary"] == nid and vol.get("handoff"):
                vol["handoff"] = None
    return {"node_id": nid, "state": state}


def node_report_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """A node's agent says what it really has. Newer reports replace older ones (seq)."""
    nid = member(st, args)
    seq = req(args, "seq", int)
    old = st["reports"].get(nid)
    if old is not None and old.get("seq", 0) >= seq:
        return {"node_id": nid, "stale": True}
    rep: dict[str, Any] = {"seq": seq}
    for key in ("dataplane", "drives", "pools", "replicas", "snapshots"):
        v = args.get(key) or {}
        if not isinstance(v, dict):
            raise BadInput(f"{key} must be a map", field=key)
        rep[key] = v
    if args.get("published"):
        check_report(args["published"])
        rep["published"] = args["published"]
    for r in rep["replicas"].values():
        if not isinstance(r, dict) or r.get("state") not in REPLICA_STATES:
            raise BadInput("replica state is not allowed", field="replicas", allowed=list(REPLICA_STATES))
        r["error"] = _short(r.get("error"))
    if args.get("storage_addresses") is not None:
        st["nodes"][nid].setdefault("addresses", {})["storage"] = list(args["storage_addresses"])
    if args.get("host_nqn") is not None:
        st["nodes"][nid]["host_nqn"] = str(args["host_nqn"])
    changed = map_events.changed_replicas(old, rep)
    before = map_events.replica_states(st, replica_view, changed)
    st["reports"][nid] = rep
    _settle(st, nid)
    map_events.replica_changes(st, before, map_events.replica_states(st, replica_view, changed))
    map_events.report_changes(st, nid, old, rep)
    return {"node_id": nid, "seq": seq}


def _settle(st: dict[str, Any], nid: int) -> None:
    """Fold node `nid`'s new report into the desired state it concerns."""
    rep = st["reports"][nid]
    # Sorted, never dict order: a map read back from a snapshot may hold its dicts in another
    # order, and the events recorded here must come out the same on every node.
    for key, pool in sorted(st["pools"].items()):
        if pool["node"] != nid:
            continue
        have = rep["pools"].get(pool["pool_id"])
        where = f"pool {pool['name']} on node {nid}"
        if pool["state"] == "deleting" and have is None:
            del st["pools"][key]
            map_events.record(st, "pool_deleted", f"{where} deleted", node=nid, pool=pool["name"])
        elif pool["state"] == "creating" and have is not None:
            if have.get("state") == "failed":
                pool.update(state="failed", error=_short(have.get("error")))
                msg, why = f"{where} failed: {pool['error']}", pool["error"]
                ctx = {"node": nid, "pool": pool["name"], "reason": why}
                map_events.record(st, "pool_failed", msg, severity="critical", **ctx)
            elif have.get("state") == "ready":
                pool.update(state="ready", size_bytes=int(have.get("size_bytes", 0)), error=None)
                map_events.record(st, "pool_created", f"{where} created", node=nid, pool=pool["name"])
    for uuid in sorted(u for u, v in st["volumes"].items() if any(s["node"] == nid for s in v["placement"])):
        if uuid in st["volumes"]:
            _settle_volume(st, st["volumes"][uuid])
    mine = [u for u, x in st["snapshots"].items() if any(s["node"] == nid for s in x["placement"])]
    for uuid in sorted(mine):
        if uuid in st["snapshots"]:
            settle_snapshot(st, st["snapshots"][uuid])
    settle_node(st, nid)


def _settle_volume(st: dict[str, Any], vol: dict[str, Any]) -> None:
    failover_map.settle_in_sync(st, vol)  # through the module: the simulator patches it
    views = {s["node"]: replica_view(st, vol, s["node"]) for s in vol["placement"]}
    if vol["state"] == "deleting":
        if not still_holding(st, vol, "replicas"):
            _drop_volume(st, vol)
        return
    if vol["state"] == "creating":
        failed = [(n, v) for n, v in views.items() if v["state"] == "failed"]
        if failed and create_replace_map.retries_create(st, vol):
            create_replace_map.note_create_failures(st, vol, failed)  # the leader places it elsewhere
        elif failed:
            n, v = failed[0]
            vol["state"] = "failed"
            name = st["nodes"].get(n, {}).get("name", f"node-{n}")
            vol["error"] = f"node {name}: {v.get('step') or 'create'}: {v.get('error') or 'failed'}"
            map_events.volume_failed(st, vol, n, v)
        elif all(v["state"] == "in-sync" for v in views.values()):
            vol["state"] = "ready"
            vol["error"] = None
            map_events.record(st, "volume_ready", f"volume {vol['name']} is ready", volume=vol["uuid"])


def _drop_volume(st: dict[str, Any], vol: dict[str, Any]) -> None:
    left = left_on_down_nodes(st, vol, "replicas")
    del st["volumes"][vol["uuid"]]
    st["paths"].pop(vol["uuid"], None)
    if (st["names"].get(vol["name"]) or {}).get("uuid") == vol["uuid"]:
        del st["names"][vol["name"]]
    map_events.record(st, "volume_deleted", f"volume {vol['name']} deleted{left}", volume=vol["uuid"])


def settle_deleting_on(st: dict[str, Any], nid: int) -> None:
    """A node was called down: a delete that waited only for it finishes now (the deletes wait
    for the nodes nodeos/storage/delete_map.py says)."""

    def on_node(obj: dict[str, Any] | None) -> bool:
        placed = obj is not None and any(s["node"] == nid for s in obj["placement"])
        return placed and obj["state"] == "deleting"  # type: ignore[index]

    for uuid in sorted(st["volumes"]):  # not dict order: every node records the same events
        vol = st["volumes"].get(uuid)
        if on_node(vol):
            _settle_volume(st, vol)  # type: ignore[arg-type]
    for uuid in sorted(st["snapshots"]):
        snap = st["snapshots"].get(uuid)
        if on_node(snap):
            settle_snapshot(st, snap)  # type: ignore[arg-type]


# --- pools -----------------------------------------------------------------------------------


def pool_create_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = member(st, args)
    name = req(args, "name", str)
    key = pool_key(nid, name)
    if key in st["pools"]:
        raise AlreadyExists(f"pool {name!r} already exists on this node", field="name")
    drives = req(args, "drives", list)
    used = {d for p in st["pools"].values() if p["node"] == nid for d in p["drives"]}
    taken = sorted(set(drives) & used)
    if taken:
        raise BadInput(f"drive(s) {', '.join(taken)} already belong to a pool", field="drives")
    st["pools"][key] = {
        "name": name,
        "node": nid,
        "pool_id": req(args, "pool_id", str),
        "drives": list(drives),
        "devices": list(req(args, "devices", list)),
        "state": "creating",
        "size_bytes": 0,
        "error": None,
        "created": st["applied_index"],
    }
    if nid in st["reports"]:
        _settle(st, nid)
    return st["pools"][key]


def pool_delete_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = member(st, args)
    name = req(args, "name", str)
    key = pool_key(nid, name)
    pool = st["pools"].get(key)
    if pool is None:
        raise NotFound(f"pool {name!r} does not exist on node {nid}", field="name")
    users = sorted(
        v["name"]
        for v in st["volumes"].values()
        if any(s["pool_id"] == pool["pool_id"] for s in v["placement"])
    )
    users += sorted(
        v["name"]
        for v in (st.get("published") or {}).values()
        if any(s["pool_id"] == pool["pool_id"] for s in v["placement"])
    )
    users += sorted(
        s["name"]
        for s in st["snapshots"].values()
        if any(x["pool_id"] == pool["pool_id"] for x in s["placement"])
    )
    if users:
        raise OperationFailed(
            f"pool {name!r} still holds {', '.join(users)}; delete them first", field="name"
        )
    pool["state"] = "deleting"
    if nid in st["reports"]:
        _settle(st, nid)
    return {"name": name, "node_id": nid, "state": "deleting"}


# --- volumes ---------------------------------------------------------------------------------


def volume_create_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Placement was chosen by the leader from this very map; apply re-checks it anyway, so a
    stale decision (a pool deleted, a node relabelled meanwhile) is refused identically everywhere."""
    name = req(args, "name", str)
    name_free(st, name)
    uuid = req(args, "uuid", str)
    if uuid in st["volumes"]:
        raise AlreadyExists(f"volume uuid {uuid} exists", field="uuid")
    placement = check_placement(st, args.get("placement"))
    kind = args.get("kind", "volume")
    size = req(args, "size_bytes", int)
    if kind != "clone":  # a clone lives where its snapshot lives, wherever the labels moved
        check_spread(st, placement, args.get("spread", "node"))
        check_room(st, name, size, placement)  # two creates decided on one map: the second may not fit
    origin_uuid = None
    if kind == "clone":
        snap = snapshot_by_name(st, req(args, "origin", str), "snapshot")
        if snap["state"] != "ready":
            raise OperationFailed(f"snapshot {snap['name']!r} is {snap['state']}", field="snapshot")
        origin_uuid = snap["uuid"]
    vol = {
        "uuid": uuid,
        "name": name,
        "vol_id": "v" + uuid.replace("-", ""),
        "nqn": req(args, "nqn", str),
        "nguid": uuid.replace("-", ""),
        "serial": uuid.replace("-", "")[:20],
        "size_bytes": size,
        "replicas": len(placement),
        "spread": args.get("spread", "node"),
        "placement": placement,
        "primary": placement[0]["node"],
        "epoch": 1,
        "in_sync": [s["node"] for s in placement],
        "state": "creating",
        "error": None,
        "kind": kind,
        "origin": args.get("origin"),
        "origin_uuid": origin_uuid,
        "hosts": [],
        "qos_iops": args.get("qos_iops"),
        "qos_mbps": args.get("qos_mbps"),
        "created": st["applied_index"],
    }
    st["volumes"][uuid] = vol
    st["names"][name] = {"kind": "volume", "uuid": uuid}
    set_paths(st, vol)
    nodes = ", ".join(str(s["node"]) for s in placement)
    map_events.record(st, "volume_created", f"volume {name} created on node(s) {nodes}", volume=uuid)
    _settle_volume(st, vol)
    return {"uuid": uuid, "name": name}


def volume_delete_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Mark the volume deleting; it leaves the map once no replica node reports it. Its
    snapshots stay (thin snapshots do not depend on their origin)."""
    vol = volume_by_name(st, req(args, "name", str))
    vol["state"] = "deleting"
    drop_freezes_of(st, vol)
    _settle_volume(st, vol)
    return {"name": vol["name"], "uuid": vol["uuid"], "state": "deleting"}


def volume_resize_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    vol = volume_by_name(st, req(args, "name", str))
    size = req(args, "size_bytes", int)
    if size < vol["size_bytes"]:
        raise BadInput("volumes only grow", field="size", allowed=f">= {vol['size_bytes']} bytes")
    vol["size_bytes"] = size
    return {"name": vol["name"], "size_bytes": size}


HANDLERS: dict[str, dict[int, Callable[[dict[str, Any], dict[str, Any]], Any]]] = {
    "node_label": {1: node_label_v1},
    "node_set_state": {1: node_set_state_v1},
    "node_report": {1: node_report_v1},
    "pool_create": {1: pool_create_v1},
    "pool_delete": {1: pool_delete_v1},
    "volume_create": {1: volume_create_v1},
    "volume_delete": {1: volume_delete_v1},
    "volume_resize": {1: volume_resize_v1},
}
