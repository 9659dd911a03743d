"""A planned primary move, on the old primary's side (drain; nodeos/cluster/failover.py).

When the map asks this node to hand over a volume it is primary of (`handoff` at the volume's
epoch), the node turns that volume's front end ANA inaccessible (the target refuses the host's
I/O from then on), lets what md already holds drain, and says so in its report
(`handed_off: epoch`). Only then does the leader commit the failover, so the old and the new
primary never serve at once. A handoff the map withdraws (the node undrained) before the
failover lifts the fence again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeos.errors import NodeosError

LOG = logging.getLogger("nodeosd.agent")
DRAIN_S = 1.0  # in-flight writes already inside md finish in device time; this bounds it


def wanted(st: dict[str, Any], me: int, vrecs: dict[str, dict[str, Any]]) -> dict[str, int]:
    """uuid -> epoch of the local primaries the map asks to hand over (pure)."""
    out = {}
    for v in vrecs.values():
        if v.get("role") != "primary" or v["state"] != "ready":
            continue
        vol = st["volumes"].get(v["uuid"])
        ho = (vol or {}).get("handoff")
        if vol and ho and vol["primary"] == me and ho.get("epoch") == vol["epoch"] == v.get("epoch"):
            out[v["uuid"]] = int(vol["epoch"])
    return out


async def follow(
    node: Any, st: dict[str, Any], me: int, vrecs: dict[str, dict[str, Any]], done: dict[str, int]
) -> None:
    """Fence the volumes the map asks to hand over, unfence withdrawn ones; `done` (uuid ->
    epoch) is what the report confirms."""
    want = wanted(st, me, vrecs)
    ops = node.ops
    by_uuid = {v["uuid"]: v for v in vrecs.values()}
    for uuid in sorted(set(ops.handing_off) - set(want)):
        ops.handing_off.discard(uuid)
        done.pop(uuid, None)
        v = by_uuid.get(uuid)
        if v is not None and v.get("role") == "primary" and v["state"] == "ready":
            try:
                await ops.call("apply_export", ops.spec_for(v))
                LOG.warning("volume %s: handoff withdrawn, front end serves again", v["name"])
            except NodeosError as err:
                ops.handing_off.add(uuid)  # retried at the next pass
                LOG.error("volume %s: handoff withdrawal not applied: %s", v["name"], err.message)
    fresh = [u for u in sorted(want) if done.get(u) != want[u]]
    for uuid in fresh:
        v = by_uuid[uuid]
        ops.handing_off.add(uuid)
        try:
            await ops.call("apply_export", ops.spec_for(v))
        except NodeosError as err:
            LOG.error("volume %s: handoff fence not applied: %s", v["name"], err.message)
            continue
        LOG.warning("volume %s epoch %d: front end inaccessible for a planned handoff", v["name"], want[uuid])
    if fresh:
        await asyncio.sleep(DRAIN_S)
        for uuid in fresh:
            if uuid in ops.handing_off:
                done[uuid] = want[uuid]
