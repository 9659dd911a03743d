"""The order in which a replicated volume grows (pure; planned by nodeos/agent/plan.py, carried
out by nodeos/node/mirror_ops.py `grow`).

The map records the new size at once (`volume_resize`); then, each step one durable
`volume.resize` operation with its phase:
1. "legs": every secondary grows its LV (and so the replica namespace its primary attaches);
2. "primary": once every other replica node reports its replica at the new size, the primary
   grows its own LV, sees every attached leg at the new size, grows md and its front end;
3. "front": once the primary reports the new size, each secondary grows its view and front end.
The hosts' multipath device takes its size from the optimized path (the primary's) first: the
inaccessible paths follow. A replica node that is down holds the grow at step 2 until it is
back (or re-placed: a new replica is made at the new size).
"""

from __future__ import annotations

from typing import Any

from nodeos.storage.lookup import replica_report


def reported_size(st: dict[str, Any], vol: dict[str, Any], nid: int) -> int:
    """The size node `nid` reports for its replica of `vol` (0: none)."""
    rep = replica_report(st, nid, vol["uuid"])
    return int(rep.get("size_bytes") or 0)


def grow_phase(st: dict[str, Any], w: dict[str, Any], have: dict[str, Any], me: int) -> str | None:
    """The grow step this node's ready replica of `w` takes now (None: none, or not yet)."""
    size = int(w["size_bytes"])
    if have.get("role") == "primary":
        if int(have["size_bytes"]) >= size:
            return None
        others = [s["node"] for s in w["placement"] if s["node"] != me]
        return "primary" if all(reported_size(st, w, n) >= size for n in others) else None
    if int(have["size_bytes"]) < size:
        return "legs"
    front = int(have.get("front_bytes") or have["size_bytes"])
    if front < size and reported_size(st, w, w["primary"]) >= size:
        return "front"
    return None
