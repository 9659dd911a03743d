"""Deletes that finish though a node of the object is down (pure, part of the cluster map).

A volume or snapshot being deleted leaves the map once every node of it that is up no longer
reports it. A node that is down is not waited for: it is fenced (its exports refuse I/O), and
when it returns its agent deletes what the map no longer holds (nodeos/agent/plan.py, step 1;
the garbage rule in nodeos/agent/orphans.py for what it has no record of). Before, a delete
during a node's outage waited for its return (the soak: `deleting v25: s3: node down`, 300 s,
then the console gave up), and one with a node lost for good never finished.
"""

from __future__ import annotations

from typing import Any


def _reporting(st: dict[str, Any], obj: dict[str, Any], section: str) -> list[tuple[int, bool]]:
    """(node, is down) for each node of `obj` whose report (`section`: "replicas" for a volume,
    "snapshots" for a snapshot) still lists it."""
    return [
        (int(s["node"]), (st["nodes"].get(s["node"]) or {}).get("health", "up") == "down")
        for s in obj["placement"]
        if obj["uuid"] in ((st["reports"].get(s["node"]) or {}).get(section) or {})
    ]


def still_holding(st: dict[str, Any], obj: dict[str, Any], section: str) -> list[int]:
    """The nodes that are up and still report `obj`, being deleted: it leaves the map once none is."""
    return [n for n, down in _reporting(st, obj, section) if not down]


def left_on_down_nodes(st: dict[str, Any], obj: dict[str, Any], section: str) -> str:
    """What a delete event adds when down nodes still hold a copy of `obj`, else ""."""
    down = [n for n, is_down in _reporting(st, obj, section) if is_down]
    names = [(st["nodes"].get(n) or {}).get("name") or f"node-{n}" for n in down]
    return f"; {', '.join(names)} (down) deletes its copy when it returns" if names else ""
