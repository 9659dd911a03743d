"""The upgrade command of the cluster map: a node's single-node records brought into the map
(pure; registered by nodeos/cluster/map.py). See docs/cluster.md, "Upgrade"."""

from __future__ import annotations

from typing import Any

from nodeos.storage.lookup import pool_key
from nodeos.storage.map_common import member, set_paths


def import_node_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Adopt what a node held before the map owned it (see docs/cluster.md, "Upgrade").

    Objects already in the map (same pool key, same volume/snapshot uuid, same host) are left
    as they are, so a node that repeats the import after a crash changes nothing twice. A
    name taken by another object is reported, not overwritten."""
    nid = member(st, args)
    imported: dict[str, list[str]] = {"pools": [], "volumes": [], "snapshots": [], "hosts": [], "skipped": []}
    for h in args.get("hosts") or []:
        if h["nqn"] not in st["hosts"]:
            st["hosts"][h["nqn"]] = {
                "nqn": h["nqn"],
                "dhchap_secret": h.get("dhchap_secret"),
                "added": h.get("added"),
            }
            imported["hosts"].append(h["nqn"])
    for p in args.get("pools") or []:
        key = pool_key(nid, p["name"])
        if key not in st["pools"]:
            st["pools"][key] = {
                "name": p["name"],
                "node": nid,
                "pool_id": p["pool_id"],
                "drives": list(p["drives"]),
                "devices": list(p["devices"]),
                "state": "ready",
                "size_bytes": int(p.get("size_bytes", 0)),
                "error": None,
                "created": st["applied_index"],
            }
            imported["pools"].append(p["name"])
    pools = {p["name"]: p for p in st["pools"].values() if p["node"] == nid}
    for v in args.get("volumes") or []:
        if v["uuid"] in st["volumes"]:
            continue
        if v["name"] in st["names"] or v["pool"] not in pools:
            imported["skipped"].append(v["name"])
            continue
        vol = {
            "uuid": v["uuid"],
            "name": v["name"],
            "vol_id": v["vol_id"],
            "nqn": v["nqn"],
            "nguid": v["nguid"],
            "serial": v["serial"],
            "size_bytes": int(v["size_bytes"]),
            "replicas": 1,
            "spread": "node",
            "placement": [{"node": nid, "pool_id": pools[v["pool"]]["pool_id"]}],
            "primary": nid,
            "epoch": 1,
            "state": "ready",
            "error": None,
            "kind": v.get("kind", "volume"),
            "origin": v.get("origin"),
            "origin_uuid": None,
            "hosts": [h for h in v.get("hosts", []) if h in st["hosts"]],
            "qos_iops": v.get("qos_iops"),
            "qos_mbps": v.get("qos_mbps"),
            "created": st["applied_index"],
        }
        st["volumes"][vol["uuid"]] = vol
        st["names"][vol["name"]] = {"kind": "volume", "uuid": vol["uuid"]}
        set_paths(st, vol)
        imported["volumes"].append(vol["name"])
    by_name = {v["name"]: v for v in st["volumes"].values()}
    for s in args.get("snapshots") or []:
        uuid = s["uuid"]
        if uuid in st["snapshots"]:
            continue
        vol = by_name.get(s["volume"])
        if s["name"] in st["names"] or vol is None:
            imported["skipped"].append(s["name"])
            continue
        st["snapshots"][uuid] = {
            "uuid": uuid,
            "name": s["name"],
            "snap_id": s["snap_id"],
            "volume": vol["uuid"],
            "volume_name": vol["name"],
            "size_bytes": int(s["size_bytes"]),
            "placement": [dict(x) for x in vol["placement"]],
            "epoch": 1,
            "state": "ready",
            "error": None,
            "created": st["applied_index"],
        }
        st["names"][s["name"]] = {"kind": "snapshot", "uuid": uuid}
        imported["snapshots"].append(s["name"])
    for v in st["volumes"].values():
        if v["kind"] == "clone" and v.get("origin") and v["origin_uuid"] is None:
            ref = st["names"].get(v["origin"])
            if ref is not None and ref["kind"] == "snapshot":
                v["origin_uuid"] = ref["uuid"]
    return imported


HANDLERS = {"import_node": {1: import_node_v1}}
