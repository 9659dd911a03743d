"""A published copy whose node went down before it joined is made elsewhere (pure; feature level 4).

A published volume turns `ready` once every replica joined (holds the source's sha256). A slot
on a node that went down before its copy joined held the whole publish there: the console's
`volume publish` waited for the node to come back (seen in the soak: 840 s). Nothing is lost by
moving such a slot: its copy serves nobody yet, and every joined replica can feed a new one.

The leader (`publish_replace_commands`) gives the slot to a node that is up and schedulable,
runs the kernel data plane, holds no slot of this volume, has a pool with room for a full copy,
and keeps the replicas' spread: at the strictest level (`switch`, `rack`, `node`) at which the
volume's slots are in distinct domains now, the new node is in a domain none of the other slots
use. No such node: the slot stays (its node may come back). Never the source (it records the
checksum), never a joined replica (it serves hosts). One slot per volume per decision.

The map (`publish_replace_v1`) checks the same at apply and settles the volume: the copy plan
is re-decided, the new node copies from a joined replica. The old node, when it is back, finds
itself out of the placement and tears its copy down (nodeos/agent/published.py).
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import features
from nodeos.storage import placement
from nodeos.storage.capacity import candidates
from nodeos.storage.lookup import health_of
from nodeos.storage.publish import joined

LEVEL = 4  # the feature level that brings it (nodeos/cluster/features.py)
SPREAD_ORDER = ("switch", "rack", "node")  # strictest first
Command = tuple[str, dict[str, Any]]


def _report(st: dict[str, Any], nid: int, uuid: str) -> dict[str, Any] | None:
    return ((st["reports"].get(nid) or {}).get("published") or {}).get(uuid)


def movable(st: dict[str, Any], pub: dict[str, Any], nid: int) -> str | None:
    """Why the slot of node `nid` may not move (None: it may)."""
    nodes = [int(s["node"]) for s in pub["placement"]]
    if pub["state"] != "publishing":
        return f"the published volume is {pub['state']}"
    if nid not in nodes:
        return f"node {nid} holds no slot of it"
    if nid == int(pub["source"]):
        return "it is the source of the copies"
    if health_of(st, nid) != "down":
        return f"node {nid} is not down"
    if joined(pub["checksum"], _report(st, nid, pub["uuid"])):
        return f"the copy on node {nid} joined (it serves hosts)"
    return None


def kept_spread(cands: dict[int, placement.NodeCandidate], nodes: list[int]) -> str:
    """The strictest spread at which the slots' nodes are in distinct domains, each named by a
    label (a node without the label is a domain of its own: every level would look kept)."""
    for spread in SPREAD_ORDER[:-1]:
        if all(n in cands and cands[n].labels.get(spread) for n in nodes):
            doms = {placement.domain_of(cands[n], spread) for n in nodes}
            if len(doms) == len(nodes):
                return spread
    return "node"


def new_home(st: dict[str, Any], pub: dict[str, Any], old: int) -> dict[str, Any] | None:
    """{node, pool_id} for the slot of `old`, or None when no node fits."""
    cands = {c.node_id: c for c in candidates(st, net_of_pending=True)}
    nodes = [int(s["node"]) for s in pub["placement"]]
    spread = kept_spread(cands, nodes)
    used = {placement.domain_of(cands[n], spread) for n in nodes if n != old and n in cands}
    size = int(pub["size_bytes"])
    best: tuple[int, int, str] | None = None
    for c in sorted(cands.values(), key=lambda c: c.node_id):
        dp = ((st["reports"].get(c.node_id) or {}).get("dataplane") or {}).get("name")
        if not c.schedulable or c.node_id in nodes or dp != "kernel":
            continue
        if placement.domain_of(c, spread) in used:
            continue
        for p in sorted(c.pools, key=lambda p: p.pool_id):
            free = min(p.free_bytes, p.size_bytes)
            if p.healthy and free >= size and (best is None or free > best[0]):
                best = (free, c.node_id, p.pool_id)
    return None if best is None else {"node": best[1], "pool_id": best[2]}


def publish_replace_commands(st: dict[str, Any]) -> list[Command]:
    if features.cluster_level(st) < LEVEL:
        return []
    out: list[Command] = []
    for uuid, pub in sorted((st.get("published") or {}).items()):
        if pub["state"] != "publishing":
            continue
        for s in pub["placement"]:
            if movable(st, pub, int(s["node"])) is None:
                home = new_home(st, pub, int(s["node"]))
                if home is not None:
                    out.append(("publish_replace", {"uuid": uuid, "old": int(s["node"]), **home}))
                break  # one slot per volume per decision
    return out
