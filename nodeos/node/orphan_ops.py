"""The durable `orphan.remove` operation: one orphan's leftovers out of the data plane.

The agent's garbage rule (nodeos/agent/orphans.py) decided; this removes, under an intent
like every other data plane change (nodeos/node/ops.py), so a crash half-way is finished at
the next start (model.RECOVERY: forward). Every step is idempotent and the order is the one a
replicated volume's delete uses: exports, the mirror's legs, the view, the mirror, the remotes,
then the LVs. A leftover that has meanwhile got a local record again (the map placed the
volume back on this node) is left alone: the intent just ends. A failed removal ends its intent
too (nothing to undo: what is left is still an orphan, found again by the next scans).
"""

from __future__ import annotations

import logging
from typing import Any

from nodeos.daemon.logsetup import fields

from . import crash

LOG = logging.getLogger("nodeosd.node")


def _recorded(ops: Any, d: dict[str, Any]) -> bool:
    """Some local record (a volume, a snapshot, any later kind) names the leftover's uuid."""
    short = str(d.get("short") or "")
    names = getattr(ops.store, "names", lambda: ("volumes", "snapshots"))()
    with ops.store.read() as txn:
        for db in names:
            if db in ("meta", "hosts", "intents", "pools"):
                continue
            for _, r in txn.items(db):
                u = str(r.get("uuid") or "") if isinstance(r, dict) else ""
                if u and (u == d.get("uuid") or (short and u.replace("-", "")[:24] == short)):
                    return True
    return False


async def remove(ops: Any, d: dict[str, Any]) -> None:
    if _recorded(ops, d):
        LOG.warning("orphan %s has a local record again: left alone", d["name"], extra=fields(op=d["op"]))
        return ops._drop(d)
    for nqn in d.get("exports") or []:
        await ops.call("remove_export", nqn)
    crash.point("orphan.remove:exports-removed")
    mirror = d.get("mirror")
    if mirror and d.get("remotes"):
        # A blocked leg would hold md's stop: every leg out in one round, none behind another.
        await ops.call("cut_mirror_legs", mirror, list(d["remotes"]))
    if d.get("views") and d.get("kind") == "volume":
        await ops.call("remove_view", d["short"])
    if mirror:
        await ops.call("stop_mirror", mirror)
    for nqn in d.get("remotes") or []:
        await ops.call("detach_remote", nqn)
    for pool_id, vol_id in d.get("lvs") or []:
        await ops.call("delete_volume", pool_id, vol_id)
    ops._drop(d)


async def give_up(ops: Any, d: dict[str, Any]) -> None:
    ops._drop(d)
