"""Published volumes in the cluster map (pure command handlers, registered by map.py).

Shape (`published[uuid]`, a section of its own: no primary, no epoch, no mirror, so the
failover controller, re-placement and the replicated volumes' agents never see one):
  {uuid, name, nqn, nguid, serial, size_bytes, snapshot (uuid), snapshot_name, source (nid),
   mirrored (the snapshot's LVs hold a replicated volume's mirror layout: data at the data
   plane's mirror data offset),
   placement [{node, pool_id, seed}], checksum (sha256 hex, from the source's report),
   copy_from {target nid: source nid}, state publishing|ready|unpublishing, hosts [nqn], created}
A node's report carries `published {uuid: {state, progress, sha256, error, hosts, connected}}`
(nodeos/storage/publish.py COPY_STATES). Applying a report settles each published volume it
concerns: the checksum is recorded from the source, the copy plan re-decided, the path set
(`paths[uuid]`: optimized on every joined replica whose node is not down, nothing elsewhere) and
the state follow.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.cluster import features
from nodeos.errors import AlreadyExists, BadInput, NotFound, OperationFailed
from nodeos.storage.host_map import grant_or_revoke
from nodeos.storage.lookup import PUBLISHED as SECTION
from nodeos.storage.lookup import health_of, name_free, node_name, published_by_name, snapshot_by_name
from nodeos.storage.lookup import published_section as section
from nodeos.storage.map_common import req
from nodeos.storage.publish import COPY_STATES, check_unpublish, copy_plan, joined


def report_of(st: dict[str, Any], nid: int, uuid: str) -> dict[str, Any] | None:
    return ((st["reports"].get(nid) or {}).get(SECTION) or {}).get(uuid)


def check_report(published: Any) -> None:
    """Called by node_report on the `published` part of a report."""
    if not isinstance(published, dict):
        raise BadInput("published must be a map", field="published")
    for r in published.values():
        if not isinstance(r, dict) or r.get("state") not in COPY_STATES:
            raise BadInput(
                "published copy state is not allowed", field="published", allowed=list(COPY_STATES)
            )
        r["error"] = None if r.get("error") is None else str(r["error"])[:512]


def connected_hosts(st: dict[str, Any], pub: dict[str, Any]) -> dict[int, list[str]]:
    """Hosts each replica node reports connected; where its target cannot show connections
    (`connected: null`: nvmet without debugfs, as on Debian's kernel) every granted host may be."""
    out = {}
    for s in pub["placement"]:
        r = report_of(st, s["node"], pub["uuid"]) or {}
        if r.get("connected"):
            out[s["node"]] = list(r["connected"])
        elif "connected" in r and r["connected"] is None and pub["hosts"]:
            out[s["node"]] = list(pub["hosts"])
    return out


def volume_publish_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    name = req(args, "name", str)
    name_free(st, name)
    uuid = req(args, "uuid", str)
    if uuid in section(st) or uuid in st["volumes"]:
        raise AlreadyExists(f"volume uuid {uuid} exists", field="uuid")
    snap = snapshot_by_name(st, req(args, "snapshot", str), "snapshot")
    if snap["state"] != "ready":
        raise OperationFailed(f"snapshot {snap['name']!r} is {snap['state']}", field="snapshot")
    placement = args.get("placement")
    if not isinstance(placement, list) or not placement:
        raise BadInput("placement must list at least one replica", field="placement")
    seen: set[int] = set()
    pools = {(p["node"], p["pool_id"]): p for p in st["pools"].values()}
    snap_nodes = {s["node"] for s in snap["placement"]}
    out = []
    for slot in placement:
        nid, pid = slot.get("node"), slot.get("pool_id")
        pool = pools.get((nid, pid))
        if nid in seen or pool is None or pool["state"] != "ready":
            raise BadInput(f"slot {slot!r}: a node twice or not a ready pool", field="placement")
        seed = bool(slot.get("seed"))
        if seed and nid not in snap_nodes:
            raise BadInput(f"node {nid} does not hold snapshot {snap['name']!r}", field="placement")
        seen.add(nid)
        out.append({"node": nid, "pool_id": pid, "seed": seed})
    if out[0]["node"] != snap["primary"] or not out[0]["seed"]:
        raise BadInput("the first replica must be the snapshot's primary (the source)", field="placement")
    pub = {
        "uuid": uuid,
        "name": name,
        "nqn": req(args, "nqn", str),
        "nguid": uuid.replace("-", ""),
        "serial": uuid.replace("-", "")[:20],
        "size_bytes": snap["size_bytes"],
        "snapshot": snap["uuid"],
        "snapshot_name": snap["name"],
        "source": out[0]["node"],
        "mirrored": len(snap["placement"]) > 1,
        "placement": out,
        "checksum": None,
        "copy_from": {},
        "mismatched": [],
        "state": "publishing",
        "hosts": [],
        "created": st["applied_index"],
    }
    section(st)[uuid] = pub
    st["names"][name] = {"kind": "published", "uuid": uuid}
    st["paths"][uuid] = {}
    nodes = ", ".join(str(s["node"]) for s in out)
    msg = f"snapshot {snap['name']} published as {name} on node(s) {nodes}"
    map_events.record(st, "volume_published", msg, volume=uuid)
    settle_published(st, pub)
    return {"uuid": uuid, "name": name}


def volume_unpublish_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    pub = published_by_name(st, req(args, "name", str))
    check_unpublish(pub["name"], connected_hosts(st, pub), bool(args.get("force")))
    pub["state"] = "unpublishing"
    st["paths"][pub["uuid"]] = {}
    settle_published(st, pub)
    return {"name": pub["name"], "uuid": pub["uuid"], "state": "unpublishing"}


def publish_hosts_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    return grant_or_revoke(st, published_by_name(st, req(args, "name", str)), args)


def publish_replace_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Give the slot of node `old` (down before its copy joined) to `node`/`pool_id` (level 4,
    decided by nodeos/storage/publish_replace.py, checked again here)."""
    from nodeos.storage import placement
    from nodeos.storage.capacity import candidates
    from nodeos.storage.publish_replace import kept_spread, movable
    from nodeos.storage.replace_map import slot_move

    if features.cluster_level(st) < 4:  # refused before Raft too (commands.py); never applied below it
        raise OperationFailed("a published copy is moved from feature level 4 on", field="cmd")
    uuid = req(args, "uuid", str)
    pub = section(st).get(uuid)
    if pub is None:
        raise NotFound(f"published volume {uuid} does not exist", field="uuid")
    old, new, pool_id = slot_move(st, args)
    why = movable(st, pub, old)
    if why is not None:
        msg = f"published volume {pub['name']}: the slot of node {old} stays: {why}"
        raise OperationFailed(msg, field="old")
    nodes = [int(s["node"]) for s in pub["placement"]]
    node = st["nodes"][new]
    if new in nodes or health_of(st, new) != "up" or (node.get("state") or "active") != "active":
        msg = f"node {new} holds a slot of {pub['name']}, is down or is draining"
        raise OperationFailed(msg, field="node")
    pool = next((p for p in st["pools"].values() if p["node"] == new and p["pool_id"] == pool_id), None)
    if pool is None or pool["state"] != "ready":
        raise OperationFailed(f"pool {pool_id} of node {new} is not a ready pool", field="pool_id")
    cands = {c.node_id: c for c in candidates(st)}
    spread = kept_spread(cands, nodes)
    others = {placement.domain_of(cands[n], spread) for n in nodes if n != old}
    if placement.domain_of(cands[new], spread) in others:
        msg = f"node {new} shares a {spread} with another replica of {pub['name']}"
        raise OperationFailed(msg, field="node")
    idx = nodes.index(old)
    pub["placement"][idx] = {"node": new, "pool_id": pool_id, "seed": False}
    pub["copy_from"].pop(old, None)
    pub["mismatched"] = [n for n in pub["mismatched"] if n != old]
    map_events.record(
        st,
        "replica_replaced",
        f"published volume {pub['name']}: node {node_name(st, old)} went down before its copy "
        f"joined; the copy is made on node {node_name(st, new)} instead",
        severity="warning",
        volume=uuid,
        node=new,
        reason="node down",
    )
    settle_published(st, pub)
    return {"uuid": uuid, "name": pub["name"], "old": old, "node": new, "pool_id": pool_id}


def settle_published(st: dict[str, Any], pub: dict[str, Any]) -> None:
    """Fold the replica nodes' reports into the published volume (deterministic)."""
    order = [s["node"] for s in pub["placement"]]
    reps = {n: report_of(st, n, pub["uuid"]) for n in order}
    if pub["state"] == "unpublishing":
        holding = [n for n, r in reps.items() if r is not None]
        # From level 4 a down node is not waited for (as a delete, nodeos/storage/delete_map.py):
        # back, it finds the volume gone from the map and removes its copy.
        down = [n for n in holding if features.cluster_level(st) >= 4 and health_of(st, n) == "down"]
        if len(down) == len(holding):
            del section(st)[pub["uuid"]]
            st["paths"].pop(pub["uuid"], None)
            if (st["names"].get(pub["name"]) or {}).get("uuid") == pub["uuid"]:
                del st["names"][pub["name"]]
            names = ", ".join(node_name(st, n) for n in down)
            left = f"; {names} (down) removes its copy when it returns" if down else ""
            map_events.record(
                st, "volume_unpublished", f"volume {pub['name']} unpublished{left}", volume=pub["uuid"]
            )
        return
    src = reps.get(pub["source"]) or {}
    if pub["checksum"] is None and src.get("state") == "ready" and src.get("sha256"):
        pub["checksum"] = str(src["sha256"])
    j = {n for n, r in reps.items() if joined(pub["checksum"], r)}
    bad = sorted(
        n for n, r in reps.items() if pub["checksum"] and (r or {}).get("state") == "ready" and n not in j
    )
    for n in bad:
        if n not in pub["mismatched"]:
            pub["mismatched"].append(n)
            msg = f"published volume {pub['name']}: the copy on node {n} does not match the source's sha256"
            map_events.record(
                st, "publish_checksum_mismatch", msg, severity="warning", volume=pub["uuid"], node=n
            )
    pub["mismatched"] = [n for n in pub["mismatched"] if n in bad]
    health = {n: health_of(st, n) for n in order}
    up = {n for n in order if health[n] == "up"}
    seeds = {s["node"] for s in pub["placement"] if s["seed"]}
    pub["copy_from"] = copy_plan(order, seeds, pub["copy_from"], j, up)
    # A node that is down serves nobody: its last report (ready, the right sha256) is stale.
    st["paths"][pub["uuid"]] = {n: "optimized" for n in order if n in j and health[n] != "down"}
    if pub["state"] == "publishing" and j == set(order):
        pub["state"] = "ready"
        map_events.record(st, "volume_ready", f"published volume {pub['name']} is ready", volume=pub["uuid"])


def settle_node(st: dict[str, Any], nid: int) -> None:
    """After node `nid`'s report (or health) changed: settle what it holds or feeds."""
    for uuid in sorted(section(st)):  # not dict order: every node records events in one order
        pub = section(st)[uuid]
        if any(s["node"] == nid for s in pub["placement"]):
            settle_published(st, pub)


HANDLERS = {
    "volume_publish": {1: volume_publish_v1},
    "volume_unpublish": {1: volume_unpublish_v1},
    "publish_hosts": {1: publish_hosts_v1},
    "publish_replace": {1: publish_replace_v1},
}
