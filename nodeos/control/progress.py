"""What an operation still waits for, in one line, from the map (pure): the console says it while
it waits and when its wait ends without the operation done (issue 25: a delete that hung said
only "did not answer within 120 s")."""

from __future__ import annotations

from typing import Any

from nodeos.storage.lookup import node_name


def deleting(st: dict[str, Any], name: str) -> str:
    """Which nodes still hold the volume or snapshot `name` being deleted, and what each does."""
    ref = st["names"].get(name)
    if ref is None:
        return f"{name} is deleted"
    obj = st["volumes"].get(ref["uuid"]) or st["snapshots"].get(ref["uuid"])
    if obj is None:
        return f"{name}: not in the map"
    holding = []
    for slot in obj.get("placement") or []:
        nid = int(slot["node"])
        rep = (st["reports"].get(nid) or {}).get(
            "replicas" if ref["kind"] != "snapshot" else "snapshots"
        ) or {}
        if ref["uuid"] not in rep:
            continue
        node = st["nodes"].get(nid) or {}
        health = node.get("health", "up")
        step = rep[ref["uuid"]].get("step") or ("not started" if health == "up" else f"node {health}")
        holding.append(f"{node_name(st, nid)}: {step}")
    return f"deleting {name}: " + (
        "; ".join(holding) if holding else "every node is done, the map drops it next"
    )
