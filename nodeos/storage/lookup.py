"""Shared lookups into the storage sections of the cluster map, so a name, a pool key or what a
node reports is found one way everywhere (map handlers, control decisions and views, agents).

Pure reads of the map (`st`, the replicated state, or a copy of it) that raise the map's own
errors: they import nothing of ours but the errors and the records, so any layer may use them
without an import circle. Shapes: nodeos/storage/records.py.
"""

from __future__ import annotations

from typing import Any, cast

from nodeos.errors import AlreadyExists, NotFound
from nodeos.storage.records import NameRef, Published, Snapshot, Volume

PUBLISHED = "published"  # the section of published volumes (nodeos/storage/publish_map.py)


# --- names: one name space for volumes, clones, snapshots and published volumes ---------------


def ref_by_name(st: dict[str, Any], name: str, field: str = "name") -> NameRef:
    """Whatever is called `name`: a volume, clone, snapshot or published volume."""
    ref = st["names"].get(name)
    if ref is None:
        raise NotFound(f"volume {name!r} does not exist", field=field)
    return cast(NameRef, dict(ref))  # a copy: the caller may not edit the map


def volume_by_name(st: dict[str, Any], name: str, field: str = "name") -> Volume:
    ref = st["names"].get(name)
    if ref is None or ref["kind"] != "volume":
        raise NotFound(f"volume {name!r} does not exist", field=field)
    return st["volumes"][ref["uuid"]]


def snapshot_by_name(st: dict[str, Any], name: str, field: str = "snapshot") -> Snapshot:
    ref = st["names"].get(name)
    if ref is None or ref["kind"] != "snapshot":
        raise NotFound(f"snapshot {name!r} does not exist", field=field)
    return st["snapshots"][ref["uuid"]]


def published_section(st: dict[str, Any]) -> dict[str, Published]:
    """The published volumes; the section is made on first use (maps older than publish lack it)."""
    return st.setdefault(PUBLISHED, {})


def published_by_name(st: dict[str, Any], name: str, field: str = "name") -> Published:
    ref = st["names"].get(name)
    if ref is None or ref["kind"] != "published":
        raise NotFound(f"published volume {name!r} does not exist", field=field)
    return published_section(st)[ref["uuid"]]


def name_free(st: dict[str, Any], name: str, field: str = "name") -> None:
    """Refuse a name any volume, snapshot or published volume already has."""
    if name in st["names"]:
        raise AlreadyExists(f"a volume or snapshot named {name!r} already exists", field=field)


# --- nodes and pools ---------------------------------------------------------------------------


def node_name(st: dict[str, Any], nid: int) -> str:
    """A member's name for messages, or `node-N` for one that has none (or is gone)."""
    return str((st["nodes"].get(nid) or {}).get("name") or f"node-{nid}")


def health_of(st: dict[str, Any], nid: int) -> str:
    """A member's health as the failover controller set it (up or down: failover_map.py); up if
    never set."""
    return str((st["nodes"].get(nid) or {}).get("health") or "up")


def pool_key(nid: int, name: str) -> str:
    """The key of a pool in `pools`: pool names are unique per node only."""
    return f"{nid}/{name}"


# --- what a node reports (actual state, written by its agent in `node_report`) ---------------


def node_report(st: dict[str, Any], nid: int) -> dict[str, Any]:
    """Node `nid`'s last report, or an empty one if it never reported."""
    return st["reports"].get(nid) or {}


def reported(st: dict[str, Any], nid: int, section: str) -> dict[str, Any]:
    """One section of node `nid`'s report (`replicas`, `pools`, `dataplane`, ...), or empty."""
    return node_report(st, nid).get(section) or {}


def replica_report(st: dict[str, Any], nid: int, uuid: str) -> dict[str, Any]:
    """What node `nid` reports of its replica of volume `uuid`, or empty if it reports none."""
    return reported(st, nid, "replicas").get(uuid) or {}
