"""A planned primary move, on the old primary's side (drain; nodeos/storage/failover.py).

When the map asks this node to hand over a volume it is primary of (`handoff` at the volume's
epoch), the node turns that volume's front end ANA inaccessible (the target refuses the host's
I/O from then on), lets what md already holds drain, and says so in its report
(`handed_off: epoch`). Only then does the leader commit the failover, so the old and the new
primary never serve at once. A handoff the map withdraws (the node undrained) before the
failover lifts the fence again.
"""

from __future__ import annotations

import logging
from typing import Any

from nodeos.dataplane.mirror_names import mirror_id_for
from nodeos.errors import NodeosError

LOG = logging.getLogger("nodeosd.agent")


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


def still_fenced(st: dict[str, Any], me: int, vrecs: dict[str, dict[str, Any]], uuid: str) -> bool:
    """A volume handed off whose failover went through (the map names another primary) while
    this node's record still says primary: it stays fenced until the demote step re-exports it
    as a secondary (pure). Lifting the fence there would let the host back onto a primary whose
    mirror the new primary already cut off (a lab drive pull saw reads fail on it)."""
    vol = st["volumes"].get(uuid)
    rec = next((v for v in vrecs.values() if v.get("uuid") == uuid), None)
    return vol is not None and vol["primary"] != me and rec is not None and rec.get("role") == "primary"


async def follow(
    node: Any, st: dict[str, Any], me: int, vrecs: dict[str, dict[str, Any]], done: dict[str, int]
) -> None:
    """Fence the volumes the map asks to hand over, unfence withdrawn ones (never one whose
    failover went through: `still_fenced`); `done` (uuid -> epoch) is what the report confirms."""
    want = wanted(st, me, vrecs)
    ops = node.ops
    by_uuid = {v["uuid"]: v for v in vrecs.values()}
    for uuid in sorted(set(ops.handing_off) - set(want)):
        if still_fenced(st, me, vrecs, uuid):
            continue
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
    for uuid in [u for u in sorted(want) if done.get(u) != want[u]]:
        v = by_uuid[uuid]
        ops.handing_off.add(uuid)
        mid = mirror_id_for(uuid)
        try:
            await ops.call("apply_export", ops.spec_for(v))
            LOG.info("volume %s epoch %d: front end inaccessible, handing off", v["name"], want[uuid])
            # A write the target took before the flip may still be on its way to a leg; the
            # new primary must hold it before it serves (the lab saw a verify error without).
            await ops.call("freeze_mirror_writes", mid)
            await ops.call("thaw_mirror_writes", mid)
        except NodeosError as err:
            LOG.error("volume %s: handoff fence not applied: %s", v["name"], err.message)
            continue
        done[uuid] = want[uuid]
        LOG.warning(
            "volume %s epoch %d: front end inaccessible, writes drained: handed off", v["name"], want[uuid]
        )
