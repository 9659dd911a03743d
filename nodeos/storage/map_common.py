"""What the storage sections' command handlers share, below every one of them: the argument
helpers, a volume's path states, the state of a replica as the map sees it, and the re-check of a
leader's placement at apply. Imports no section of the map, so none of them leads back here.
"""

from __future__ import annotations

from typing import Any

from nodeos.errors import BadInput, NotFound
from nodeos.storage.placement import SPREADS, NodeCandidate, domain_of


def req(args: dict[str, Any], field: str, kind: type | tuple[type, ...]) -> Any:
    v = args.get(field)
    if not isinstance(v, kind) or isinstance(v, bool):
        raise BadInput(f"{field} is missing or of the wrong type", field=field)
    return v


def member(st: dict[str, Any], args: dict[str, Any], field: str = "node_id") -> int:
    nid = args.get(field)
    if type(nid) is not int or nid not in st["nodes"]:
        raise NotFound(f"node {nid!r} is not a member", field=field, allowed=sorted(st["nodes"]) or None)
    return nid


def set_paths(st: dict[str, Any], vol: dict[str, Any]) -> None:
    st["paths"][vol["uuid"]] = {
        slot["node"]: ("optimized" if slot["node"] == vol["primary"] else "inaccessible")
        for slot in vol["placement"]
    }


def replica_view(st: dict[str, Any], vol: dict[str, Any], nid: int) -> dict[str, Any]:
    """The state of `vol`'s replica on `nid`: what the primary's mirror says of it if it says
    anything (it sees the member), else what the node itself reports."""
    own = (st["reports"].get(nid) or {}).get("replicas", {}).get(vol["uuid"])
    prim = (st["reports"].get(vol["primary"]) or {}).get("replicas", {}).get(vol["uuid"]) or {}
    member = (prim.get("members") or {}).get(nid) if nid != vol["primary"] else None
    if own is None:
        return {"state": "creating", "step": "waiting for the node", "error": None}
    if member is not None and own.get("state") != "failed":
        return {**own, "state": member}
    return own


def check_placement(st: dict[str, Any], placement: Any, field: str = "placement") -> list[dict[str, Any]]:
    if not isinstance(placement, list) or not 1 <= len(placement) <= 3:
        raise BadInput("placement must list 1 to 3 replicas", field=field)
    out, seen = [], set()
    pool_ids = {(p["node"], p["pool_id"]): p for p in st["pools"].values()}
    for slot in placement:
        nid, pid = slot.get("node"), slot.get("pool_id")
        if nid in seen:
            raise BadInput(f"node {nid} holds two replicas", field=field)
        pool = pool_ids.get((nid, pid))
        if pool is None or pool["state"] != "ready":
            raise BadInput(f"pool {pid!r} on node {nid} is not a ready pool", field=field)
        seen.add(nid)
        out.append({"node": nid, "pool_id": pid})
    return out


def check_spread(st: dict[str, Any], placement: list[dict[str, Any]], spread: Any) -> None:
    """Replicas on distinct failure domains by the labels as applied: a placement decided
    before a concurrent `node_label` committed may no longer spread (found by the simulator)."""
    if spread not in SPREADS:
        raise BadInput(f"spread {spread!r} is not allowed", field="spread", allowed=list(SPREADS))
    seen: dict[str, int] = {}
    for slot in placement:
        n = st["nodes"][slot["node"]]
        domain = domain_of(
            NodeCandidate(slot["node"], str(n.get("name")), n.get("labels") or {}, True), spread
        )
        if domain in seen:
            raise BadInput(
                f"nodes {seen[domain]} and {slot['node']} are both in {spread} {domain!r} now; "
                "the placement is stale, create the volume again",
                field="placement",
            )
        seen[domain] = slot["node"]
