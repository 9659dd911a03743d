"""Pool capacity as the map sees it (pure): what placement decides from and what a
`volume_create` re-checks when it is applied.

A pool's room for a new volume is the free space its node last reported (thin pools: the
unwritten space, so thin volumes may overcommit a pool together: a volume fits when it fits
in the free space, whatever the pool's volumes add up to), less the sizes of the volumes the
map placed on it that the node's report does not list yet (placed after the node measured:
its figure cannot reflect them), and never more than the pool's size. Deleting volumes that
the node no longer reports are not counted: their space is back.

The leader decides with these figures (`candidates`, here, for every placement), so a
placement it proposes fits at apply unless the map moved in between; two creates decided
against the same map (concurrent requests, or a request right behind another before the
node's next report) are checked in log order at apply, and the one that no longer fits is
refused on every node alike, naming the pool and the node. Clones are not checked (they share
their snapshot's blocks and live where it lives).

Cost: the leader's decision reads every volume; an applied create reads the volumes of its
pools only (nodeos/storage/pool_index.py, beside the map).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodeos.storage import placement, pool_index
from nodeos.storage.lookup import health_of
from nodeos.storage.placement.model import PlacementRefused, human_size

PoolRef = pool_index.PoolRef


def reported(st: dict[str, Any], pool: dict[str, Any]) -> tuple[int, int | None]:
    """(size, free) of a map pool as its node last reported them (free None: no figure)."""
    have = ((st["reports"].get(pool["node"]) or {}).get("pools") or {}).get(pool["pool_id"]) or {}
    size = int(have.get("size_bytes", pool.get("size_bytes", 0)) or 0)
    free = have.get("free_bytes")
    return size, None if free is None else int(free or 0)


def pending_bytes(st: dict[str, Any], pools: Iterable[PoolRef] | None = None) -> dict[PoolRef, int]:
    """Per pool, the bytes of the volumes placed on it that its node's report does not list yet
    (all pools, or only `pools`)."""
    want = None if pools is None else set(pools)
    listed: dict[int, Any] = {}
    out: dict[PoolRef, int] = {}
    index = pool_index.active_for(st)
    if want is None and index is not None:
        return index.pending(st)  # from the volumes not listed yet, not a scan of every volume
    vols = st["volumes"].values() if index is None else _on(st, index, want or set())
    for vol in vols:
        for slot in vol["placement"]:
            ref = (slot["node"], slot["pool_id"])
            if want is not None and ref not in want:
                continue
            nid = slot["node"]
            if nid not in listed:
                listed[nid] = (st["reports"].get(nid) or {}).get("replicas") or {}
            if vol["uuid"] in listed[nid] or vol["state"] == "deleting":
                continue
            out[ref] = out.get(ref, 0) + int(vol["size_bytes"])
    return out


def _on(st: dict[str, Any], index: pool_index.PoolIndex, refs: set[PoolRef]) -> list[dict[str, Any]]:
    """The volumes on any of `refs`, each once (a volume may have two slots among them)."""
    seen: dict[str, dict[str, Any]] = {}
    for ref in sorted(refs):
        for vol in index.volumes_on(st, ref):
            seen.setdefault(vol["uuid"], vol)
    return list(seen.values())


def room(size: int, free: int, pending: int) -> int:
    """Usable space of a pool for one more volume."""
    return max(0, min(free - pending, size))


def check_room(st: dict[str, Any], name: str, size_bytes: int, slots: list[dict[str, Any]]) -> None:
    """Refuse (PlacementRefused, field `size`) a new volume that no longer fits in one of its
    pools by the figures above. A pool whose node reported no free figure is not checked here
    (the leader's placement counts it as full, so it decided nothing there)."""
    by_ref = {(p["node"], p["pool_id"]): p for p in st["pools"].values()}
    refs = [(s["node"], s["pool_id"]) for s in slots]
    pending = pending_bytes(st, refs)
    for ref in refs:
        pool = by_ref[ref]
        size, free = reported(st, pool)
        if free is None:
            continue
        usable = room(size, free, pending.get(ref, 0))
        if size_bytes <= usable:
            continue
        node = st["nodes"].get(ref[0], {}).get("name") or f"node-{ref[0]}"
        why = f"{human_size(free)} free as the node last reported"
        if pending.get(ref):
            why += f", {human_size(pending[ref])} of it promised to volumes the node has not reported yet"
        raise PlacementRefused(
            f"no room for volume {name!r} ({human_size(size_bytes)}) in pool {pool['name']!r} on node "
            f"{node}: {human_size(usable)} usable ({why}; pool size {human_size(size)}); "
            "nothing was created, create it again to place it elsewhere",
            field="size",
        )


def candidates(st: dict[str, Any], net_of_pending: bool = False) -> list[placement.NodeCandidate]:
    """Every member as placement sees it: labels, schedulable or not, pools with free space
    (`net_of_pending`: less the volumes placed there that the node has not reported yet, the
    figure a `volume_create` is checked against at apply, `check_room` above)."""
    pending = pending_bytes(st) if net_of_pending else {}
    by_node: dict[int, list[dict[str, Any]]] = {}
    for p in st["pools"].values():  # once, not once per node (1,000 nodes: a million reads)
        by_node.setdefault(p["node"], []).append(p)
    out = []
    for nid, n in st["nodes"].items():
        rep = st["reports"].get(nid) or {}
        drives = rep.get("drives") or {}
        dp_ok = bool(rep) and not (rep.get("dataplane") or {}).get("error")
        pools = []
        for p in by_node.get(nid, ()):
            have = (rep.get("pools") or {}).get(p["pool_id"]) or {}
            size, free = reported(st, p)
            failing = any((drives.get(d) or {}).get("health") in ("failing", "missing") for d in p["drives"])
            pools.append(
                placement.PoolCandidate(
                    node_id=nid,
                    pool_id=p["pool_id"],
                    size_bytes=size,
                    free_bytes=max(0, (free or 0) - pending.get((nid, p["pool_id"]), 0)),
                    healthy=p["state"] == "ready" and not failing and have.get("state") != "failed",
                )
            )
        out.append(
            placement.NodeCandidate(
                node_id=nid,
                name=str(n.get("name")),
                labels=dict(n.get("labels") or {}),
                # A node the leader holds down gets nothing new: a create placed there waits for it.
                schedulable=n.get("role") == "storage"
                and n.get("state", "active") == "active"
                and dp_ok
                and health_of(st, nid) != "down",
                pools=tuple(pools),
            )
        )
    return out
