"""Snapshots in the cluster map (pure command handlers, registered by nodeos/cluster/map.py).

A snapshot of a 1-replica volume is one thin LVM snapshot, taken when the node sees it.
A snapshot of a replicated volume must be one point of the write stream on every replica
(crash-consistent), so it goes through phases driven by the map:

  freezing  the volume carries `freeze: <snap uuid>`; its primary's agent blocks writes to
            the mirror (in-flight ones drained: every acknowledged write is on every leg) and
            reports `frozen: <snap uuid>` for the volume;
  taking    applied from that report: every placement node snapshots its own replica LV;
  ready     every placement node reports its snapshot ready while the primary still reports
            the freeze; the volume's freeze is cleared and the primary thaws.

A primary of this release takes the whole snapshot in one step when it sees `freezing`
(nodeos/agent/onestep.py, issue 29): it holds the writes, has every leg snapshotted (its own and,
over the peer path, each replica node's), lets the writes go within milliseconds, and only then
reports `frozen`; the replica nodes report their snapshots as they would in `taking`. The map's
phases and checks are the same either way: `frozen` means "every leg taken while the primary held
the writes", whether it still holds them or already let them go.

A snapshot that fails anywhere, is aborted (`snapshot_abort`, sent by the primary when the
freeze lasts too long) or deleted while not ready is dropped and the freeze cleared; the
agents delete any replica snapshot already taken, as for any snapshot the map dropped.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.errors import NotSupported, OperationFailed
from nodeos.storage.delete_map import left_on_down_nodes, still_holding
from nodeos.storage.lookup import name_free, snapshot_by_name, volume_by_name
from nodeos.storage.map_common import replica_view, req

PHASES = ("freezing", "taking")


def _drop(st: dict[str, Any], snap: dict[str, Any], why: str | None = None) -> None:
    clear_freeze(st, snap)
    del st["snapshots"][snap["uuid"]]
    st["names"].pop(snap["name"], None)
    views = {s["node"]: ((st["reports"].get(s["node"]) or {}).get("snapshots") or {}).get(snap["uuid"])
             for s in snap["placement"]}  # fmt: skip
    if why is None and snap["state"] == "deleting":
        why = "deleted" + left_on_down_nodes(st, snap, "snapshots")
    why = why or "not taken"
    map_events.snapshot_dropped(st, snap, why, views)


def clear_freeze(st: dict[str, Any], snap: dict[str, Any]) -> None:
    vol = st["volumes"].get(snap["volume"])
    if vol is not None and vol.get("freeze") == snap["uuid"]:
        vol["freeze"] = None


def _primary_replica(st: dict[str, Any], snap: dict[str, Any]) -> dict[str, Any]:
    prim = snap.get("primary")
    return ((st["reports"].get(prim) or {}).get("replicas") or {}).get(snap["volume"]) or {}


def settle_snapshot(st: dict[str, Any], snap: dict[str, Any]) -> None:
    views = {
        s["node"]: ((st["reports"].get(s["node"]) or {}).get("snapshots") or {}).get(snap["uuid"])
        for s in snap["placement"]
    }
    if snap["state"] == "deleting":
        if not still_holding(st, snap, "snapshots"):
            _drop(st, snap)
        return
    if snap["state"] != "creating":
        return
    if any(v is not None and v.get("state") == "failed" for v in views.values()):
        # A snapshot not taken at its moment is worth nothing later: it is dropped.
        _drop(st, snap)
        return
    all_ready = all(v is not None and v.get("state") == "ready" for v in views.values())
    phase = snap.get("phase")
    if phase is None:
        if all_ready:
            snap["state"] = "ready"
            map_events.snapshot_taken(st, snap)
        return
    frozen = _primary_replica(st, snap).get("frozen") == snap["uuid"]
    if phase == "freezing" and frozen:
        snap["phase"] = "taking"
    elif phase == "taking" and all_ready and frozen:
        # Every replica snapshot was taken while the primary held writes (its latest report
        # still says so): one point of the write stream everywhere.
        snap.update(state="ready", phase=None)
        clear_freeze(st, snap)
        map_events.snapshot_taken(st, snap)


def snapshot_create_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    vol = volume_by_name(st, req(args, "volume", str), "name")
    if vol["state"] != "ready":
        raise OperationFailed(f"volume {vol['name']!r} is {vol['state']}", field="name")
    replicated = int(vol.get("replicas") or 1) > 1
    if replicated:
        check_snapshot_allowed(st, vol)
    name = req(args, "name", str)
    name_free(st, name, "snapshot")
    uuid = req(args, "uuid", str)
    snap = {
        "uuid": uuid,
        "name": name,
        "snap_id": "s" + uuid.replace("-", ""),
        "volume": vol["uuid"],
        "volume_name": vol["name"],
        "size_bytes": vol["size_bytes"],
        "placement": [dict(s) for s in vol["placement"]],
        "primary": vol["primary"],
        "epoch": vol["epoch"],
        "state": "creating",
        "phase": "freezing" if replicated else None,
        "error": None,
        "created": st["applied_index"],
    }
    st["snapshots"][uuid] = snap
    st["names"][name] = {"kind": "snapshot", "uuid": uuid}
    if replicated:
        vol["freeze"] = uuid
    settle_snapshot(st, snap)
    return {"uuid": uuid, "name": name}


def check_snapshot_allowed(st: dict[str, Any], vol: dict[str, Any]) -> None:
    """A replicated volume is snapshotted only where its primary's data plane can hold the
    mirror's writes (it reports `mirror_write_freeze`), with every replica in sync (a leg behind
    would not hold the point in time) and one snapshot at a time (one freeze)."""
    dp = (st["reports"].get(vol["primary"]) or {}).get("dataplane") or {}
    if dp.get("mirror_write_freeze") is False:
        node = st["nodes"].get(vol["primary"], {}).get("name", vol["primary"])
        raise NotSupported(
            f"volume {vol['name']!r}: the {dp.get('name')} data plane of its primary {node} has no mirror "
            "write freeze, so crash-consistent snapshots of replicated volumes are not available there",
            field="snapshot",
        )
    if vol.get("freeze"):
        other = st["snapshots"].get(vol["freeze"]) or {"name": vol["freeze"]}
        raise OperationFailed(
            f"volume {vol['name']!r}: snapshot {other['name']!r} is being taken; try again when it is done",
            field="name",
        )
    behind = [
        str(st["nodes"].get(s["node"], {}).get("name", s["node"]))
        for s in vol["placement"]
        if replica_view(st, vol, s["node"])["state"]
        not in (("in-sync", "degraded") if s["node"] == vol["primary"] else ("in-sync",))
    ]  # the primary's mirror is "degraded" while a leg catches up: that leg is named
    if behind:
        raise OperationFailed(
            f"volume {vol['name']!r}: the replica(s) on {', '.join(behind)} are not in sync; "
            "a snapshot needs every replica in sync",
            field="name",
        )


def snapshot_abort_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """The primary gives up a freeze that lasted too long: the snapshot is dropped unless it
    became ready meanwhile (then nothing changes)."""
    uuid = req(args, "uuid", str)
    snap = st["snapshots"].get(uuid)
    if snap is None or snap["state"] != "creating":
        return {"uuid": uuid, "aborted": False, "state": None if snap is None else snap["state"]}
    reason = str(args.get("reason") or "")[:200]
    _drop(st, snap, f"aborted by the primary: {reason or 'no reason given'}")
    return {"uuid": uuid, "name": snap["name"], "aborted": True, "reason": reason}


def snapshot_delete_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    snap = snapshot_by_name(st, req(args, "name", str), "name")
    clones = sorted(v["name"] for v in st["volumes"].values() if v.get("origin_uuid") == snap["uuid"])
    if clones and not args.get("force"):
        raise OperationFailed(
            f"snapshot {snap['name']!r} is the origin of {', '.join(clones)}; "
            "use --force to delete it anyway",
            field="name",
        )
    snap["state"] = "deleting"
    snap["phase"] = None
    clear_freeze(st, snap)
    settle_snapshot(st, snap)
    return {"name": snap["name"], "deleted": True, "kind": "snapshot"}


def drop_freezes_of(st: dict[str, Any], vol: dict[str, Any]) -> None:
    """A volume being deleted takes no snapshot any more: the one in progress is dropped."""
    snap = st["snapshots"].get(vol.get("freeze") or "")
    if snap is not None and snap["state"] == "creating":
        _drop(st, snap, f"volume {vol['name']} deleted")
    vol["freeze"] = None


HANDLERS = {
    "snapshot_create": {1: snapshot_create_v1},
    "snapshot_delete": {1: snapshot_delete_v1},
    "snapshot_abort": {1: snapshot_abort_v1},
}
