"""The leader's side of a create a node failed (pure; the map side: create_replace_map.py).

For each creating volume with a slot whose node failed to make its replica, or is down (a new
volume holds no data: nothing is gained by waiting for that node, and the console's create is
waiting): a new place from the placement package, on a node that is up and schedulable, holds no
replica of the volume, never failed it, and sits off the other slots' failure domains at the
volume's spread, with room for it (`volume_create_replace`); no such node, the volume fails,
naming why (`volume_create_fail`), unless its node is only down (it may come back and make it).
One slot per volume per decision: the next waits for the map to apply it.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import features
from nodeos.errors import BadInput
from nodeos.storage import capacity, placement
from nodeos.storage.create_replace_map import LEVEL, failed_nodes
from nodeos.storage.lookup import health_of

Command = tuple[str, dict[str, Any]]


def create_replace_commands(st: dict[str, Any]) -> list[Command]:
    if features.cluster_level(st) < LEVEL:
        return []
    lost = {n for n in st["nodes"] if health_of(st, n) == "down"}
    stuck = [
        v
        for _, v in sorted(st["volumes"].items())
        if v["state"] == "creating"
        and v.get("kind") != "clone"
        and (v.get("create_failed") or any(s["node"] in lost for s in v["placement"]))
    ]
    if not stuck:
        return []
    index = placement.CapacityIndex(capacity.candidates(st, net_of_pending=True))
    unsure = {n for n in st["nodes"] if health_of(st, n) != "up"}
    out: list[Command] = []
    for vol in stuck:
        failed = failed_nodes(vol)
        nodes = {int(s["node"]) for s in vol["placement"]}
        old = next((n for n in (int(s["node"]) for s in vol["placement"]) if n in failed), None)
        if old is None:
            old = next((n for n in (int(s["node"]) for s in vol["placement"]) if n in lost), None)
        if old is None:
            continue  # re-placed already; the new node is making its replica
        try:
            (got,) = index.place(
                vol["uuid"],
                int(vol["size_bytes"]),
                1,
                vol.get("spread", "node"),
                exclude_nodes=nodes | failed | unsure,
                avoid_domains_of=nodes - {old},
                reserve=True,
            )
        except BadInput as err:
            if old in failed:  # a node that is only down may come back and make it
                reason = f"no other node can take its replica: {err.message}"
                out.append(("volume_create_fail", {"uuid": vol["uuid"], "reason": reason}))
            continue
        where = {"node": got.node_id, "pool_id": got.pool_id}
        out.append(
            ("volume_create_replace", {"uuid": vol["uuid"], "epoch": vol["epoch"], "old": old, **where})
        )
    return out
