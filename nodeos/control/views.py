"""What the console shows, computed from the cluster map (pure).

Every view is built from one map state, so a `volume show` answered by any node after a read
barrier at the leader shows the same thing. Secrets never appear in a view.
"""

from __future__ import annotations

from typing import Any

from nodeos import tlskey
from nodeos.dataplane.base import Listener
from nodeos.errors import OperationFailed
from nodeos.storage.failover_map import in_sync_of
from nodeos.storage.lookup import health_of, node_name, replica_report
from nodeos.storage.storage_map import replica_view


def node_by_ref(st: dict[str, Any], ref: str | int) -> int | None:
    """A node named by its name or its member id."""
    for nid, n in st["nodes"].items():
        if n.get("name") == ref or str(nid) == str(ref):
            return int(nid)
    return None


def pool_of(st: dict[str, Any], nid: int, pool_id: str) -> dict[str, Any] | None:
    for p in st["pools"].values():
        if p["node"] == nid and p["pool_id"] == pool_id:
            return p
    return None


def node_listeners(st: dict[str, Any], nid: int) -> list[dict[str, Any]]:
    rep = st["reports"].get(nid) or {}
    return [dict(li, node=node_name(st, nid)) for li in (rep.get("dataplane") or {}).get("listeners") or []]


def volume_listeners(st: dict[str, Any], vol: dict[str, Any], nid: int) -> list[dict[str, Any]]:
    """The paths a volume has on node `nid`: the node's listeners under the volume's TLS policy,
    as its export makes them (nodeos/node/model.py tls_listeners)."""
    from nodeos.node.model import tls_listeners

    have = node_listeners(st, nid)
    lst = tuple(
        Listener(li["trtype"], li["traddr"], str(li["trsvcid"]), li.get("adrfam") or "ipv4") for li in have
    )
    out = tls_listeners(lst, tlskey.volume_policy(vol.get("hosts") or [], st["hosts"]))
    return [
        {
            "trtype": li.trtype,
            "traddr": li.traddr,
            "trsvcid": li.trsvcid,
            "adrfam": li.adrfam,
            "node": node_name(st, nid),
        }
        for li in out
    ]


def replica_health(st: dict[str, Any], vol: dict[str, Any]) -> str:
    """One word for `volume list`: how many replicas are in sync, e.g. "3/3"."""
    cur = set(in_sync_of(vol))
    good = sum(
        1
        for s in vol["placement"]
        if s["node"] in cur and replica_view(st, vol, s["node"])["state"] == "in-sync"
    )
    return f"{good}/{len(vol['placement'])}"


def rebuild_progress(st: dict[str, Any], vol: dict[str, Any]) -> dict[int, float]:
    """Fraction copied of each leg the primary's mirror is rebuilding (its own report)."""
    rep = replica_report(st, vol["primary"], vol["uuid"])
    if rep.get("epoch", vol["epoch"]) != vol["epoch"]:
        return {}
    out = {}
    for nid, frac in (rep.get("progress") or {}).items():
        if isinstance(frac, (int, float)) and not isinstance(frac, bool):
            out[int(nid)] = float(frac)
    return out


def grants_in_force(st: dict[str, Any], vol: dict[str, Any]) -> bool | None:
    """A volume's grant or revoke is done once every node of it that is up says its export
    carries the volume's hosts (None: not yet). A node that is down is not waited for: it is
    fenced (its paths refuse I/O) and applies the map's hosts when it returns (the soak: every
    grant during a node's outage failed after the console's 100 s). A replica that failed
    raises, naming its node."""
    want = sorted(vol["hosts"])
    for s in vol["placement"]:
        rep = replica_report(st, s["node"], vol["uuid"])
        if rep.get("state") == "failed":
            raise OperationFailed(
                f"volume {vol['name']!r} on {node_name(st, s['node'])}: {rep.get('error')}", field="name"
            )
        if health_of(st, s["node"]) == "up" and sorted(rep.get("hosts") or []) != want:
            return None
    return True


def volume_view(st: dict[str, Any], vol: dict[str, Any]) -> dict[str, Any]:
    prim = vol["primary"]
    pool = pool_of(st, prim, next(s["pool_id"] for s in vol["placement"] if s["node"] == prim))
    replicas = []
    in_sync = set(in_sync_of(vol))
    progress = rebuild_progress(st, vol)
    for s in vol["placement"]:
        r = replica_view(st, vol, s["node"])
        p = pool_of(st, s["node"], s["pool_id"])
        replicas.append(
            {
                "node": node_name(st, s["node"]),
                "node_id": s["node"],
                "pool": p["name"] if p else None,
                "state": r["state"],
                "step": r.get("step"),
                "error": r.get("error"),
                "ana_state": (st["paths"].get(vol["uuid"]) or {}).get(s["node"]),
                "role": "primary" if s["node"] == prim else "secondary",
                "in_sync": s["node"] in in_sync,  # holds every acknowledged write (the map's word)
                "node_health": health_of(st, s["node"]),
                "rebuild_progress": progress.get(s["node"]),
            }
        )
    unavailable = None
    dp_error = ((st["reports"].get(prim) or {}).get("dataplane") or {}).get("error")
    if vol["state"] == "ready" and dp_error:
        unavailable = f"the data plane of the primary {node_name(st, prim)} is down ({dp_error})"
    elif vol["state"] == "ready" and health_of(st, prim) != "up" and int(vol["replicas"]) > 1:
        unavailable = "the primary is down and no in-sync replica is up to take over"
    listeners = []
    if vol["state"] != "deleting":
        for s in vol["placement"]:
            listeners += volume_listeners(st, vol, s["node"])
    return {
        "name": vol["name"],
        "uuid": vol["uuid"],
        "vol_id": vol["vol_id"],
        "nqn": vol["nqn"],
        "nguid": vol["nguid"],
        "serial": vol["serial"],
        "pool": pool["name"] if pool else None,
        "size_bytes": vol["size_bytes"],
        "state": vol["state"],
        "error": vol.get("error"),
        "kind": vol["kind"],
        "origin": vol.get("origin"),
        "hosts": list(vol["hosts"]),
        "qos_iops": vol.get("qos_iops"),
        "qos_mbps": vol.get("qos_mbps"),
        "created": vol.get("created"),
        "replica_count": vol["replicas"],
        "spread": vol.get("spread", "node"),
        "replicas": replicas,
        "health": replica_health(st, vol),
        "primary": node_name(st, prim),
        "epoch": vol["epoch"],
        "in_sync": [node_name(st, n) for n in in_sync_of(vol)],
        "available": unavailable is None,
        "unavailable": unavailable,
        "freeze": (st["snapshots"].get(vol.get("freeze") or "") or {}).get("name"),
        "listeners": listeners,
        "snapshots": sorted(s["name"] for s in st["snapshots"].values() if s["volume"] == vol["uuid"]),
    }


def snapshot_view(st: dict[str, Any], snap: dict[str, Any]) -> dict[str, Any]:
    first = snap["placement"][0]
    pool = pool_of(st, first["node"], first["pool_id"])
    return {
        "name": snap["name"],
        "uuid": snap["uuid"],
        "snap_id": snap["snap_id"],
        "kind": "snapshot",
        "volume": snap["volume_name"],
        "volume_uuid": snap["volume"],
        "pool": pool["name"] if pool else None,
        "size_bytes": snap["size_bytes"],
        "state": snap["state"],
        "phase": snap.get("phase"),  # a replicated volume's snapshot: freezing, taking
        "error": snap.get("error"),
        "created": snap.get("created"),
        "nodes": [node_name(st, s["node"]) for s in snap["placement"]],
        "nqn": None,
        "listeners": [],
    }


def volume_rows(st: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for v in st["volumes"].values():
        view = volume_view(st, v)
        rows.append(
            {
                "name": v["name"],
                "kind": v["kind"],
                "pool": view["pool"],
                "size_bytes": v["size_bytes"],
                "state": v["state"],
                "nqn": v["nqn"],
                "vol_id": v["vol_id"],
                "uuid": v["uuid"],
                "hosts": list(v["hosts"]),
                "origin": v.get("origin"),
                "replicas": [{"node": r["node"], "state": r["state"]} for r in view["replicas"]],
                "health": view["health"],
                "primary": view["primary"],
            }
        )
    for s in st["snapshots"].values():
        view = snapshot_view(st, s)
        rows.append(
            {
                "name": s["name"],
                "kind": "snapshot",
                "pool": view["pool"],
                "size_bytes": s["size_bytes"],
                "state": s["state"],
                "nqn": None,
                "vol_id": s["snap_id"],
                "uuid": s["uuid"],
                "hosts": [],
                "origin": s["volume_name"],
                "replicas": [{"node": n, "state": s["state"]} for n in view["nodes"]],
                "health": "-",
                "primary": None,
            }
        )
    return sorted(rows, key=lambda r: r["name"])


def pool_view(st: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
    rep = ((st["reports"].get(p["node"]) or {}).get("pools") or {}).get(p["pool_id"]) or {}
    return {
        "name": p["name"],
        "node": node_name(st, p["node"]),
        "node_id": p["node"],
        "pool_id": p["pool_id"],
        "state": p["state"],
        "error": p.get("error"),
        "drives": list(p["drives"]),
        "size_bytes": rep.get("size_bytes", p.get("size_bytes", 0)),
        "free_bytes": rep.get("free_bytes"),
    }


def host_rows(st: dict[str, Any]) -> list[dict[str, Any]]:
    vols = [*st["volumes"].values(), *(st.get("published") or {}).values()]  # published too (issue 13)
    return [
        {
            "nqn": h["nqn"],
            "dhchap": bool(h.get("dhchap_secret")),
            "tls": tlskey.host_policy(h),
            "tls_derivation": tlskey.host_derivation(h) if tlskey.host_policy(h) != "off" else None,
            "added": h.get("added"),
            "volumes": sorted(v["name"] for v in vols if h["nqn"] in v["hosts"]),
        }
        for h in sorted(st["hosts"].values(), key=lambda h: h["nqn"])
    ]


def node_view(st: dict[str, Any], nid: int, raft: dict[str, Any] | None = None) -> dict[str, Any]:
    n = st["nodes"][nid]
    rep = st["reports"].get(nid) or {}
    pools = [pool_view(st, p) for p in st["pools"].values() if p["node"] == nid]
    drives = rep.get("drives") or {}
    dp = rep.get("dataplane") or {}
    health = "unknown"
    if rep:
        bad = {
            h: sorted(d for d, v in drives.items() if (v or {}).get("health") == h)
            for h in ("missing", "failing")
        }
        health = "; ".join(f"{h} drives: {', '.join(ds)}" for h, ds in bad.items() if ds) or "ok"
        if dp.get("error"):
            health = f"data plane: {dp['error']}"
    if health_of(st, nid) == "down":
        health = "down: its lease ran out (fenced)"
    return {
        "name": n.get("name"),
        "id": nid,
        "addresses": {
            "peer": (n.get("addresses") or {}).get("peer"),
            "storage": list((n.get("addresses") or {}).get("storage") or []),
        },
        "labels": dict(n.get("labels") or {}),
        "role": n.get("role"),
        "raft": (raft or {}).get(nid, "none"),
        "state": n.get("state", "active"),
        "lease": health_of(st, nid),
        "rebuild_mbps": n.get(
            "rebuild_mbps"
        ),  # None: the data plane's default  # down: its lease ran out (nodeos/storage/failover.py)
        "dataplane": dp.get("name"),
        "version": n.get("release"),  # the release the node reported (add_node / node_update)
        "capacity_bytes": sum(int(p["size_bytes"] or 0) for p in pools),
        "free_bytes": sum(int(p["free_bytes"] or 0) for p in pools),
        "pools": [p["name"] for p in pools],
        "drives": len(drives),
        "health": health,
        "replicas": sum(1 for v in st["volumes"].values() if any(s["node"] == nid for s in v["placement"])),
        "primaries": sorted(
            v["name"]
            for v in st["volumes"].values()
            if v["primary"] == nid and int(v.get("replicas") or 1) > 1
        ),
        # What a drain still has to move off the node (re-placed elsewhere, nodeos/storage/replace.py),
        # and what it cannot (a single copy has nothing to be copied from).
        "secondaries": sorted(
            v["name"]
            for v in st["volumes"].values()
            if v["primary"] != nid
            and int(v.get("replicas") or 1) > 1
            and v["state"] != "deleting"
            and any(s["node"] == nid for s in v["placement"])
        ),
        "single_copies": sorted(
            v["name"]
            for v in st["volumes"].values()
            if int(v.get("replicas") or 1) <= 1 and any(s["node"] == nid for s in v["placement"])
        ),
        # Leftovers no record nor map entry owns, in their grace period (nodeos/agent/orphans.py).
        "orphans": list(((dp.get("orphans") or {}).get("pending")) or []),
        "orphans_held": (dp.get("orphans") or {}).get("held"),
        "orphans_removed": int((dp.get("orphans") or {}).get("removed") or 0),
        "stuck_calls": list(dp.get("stuck") or []),
    }
