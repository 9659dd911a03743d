"""A rolling upgrade's release of a domain's replicas for its update: `upgrade_step` v2 (pure).

`upgrade_step` v2 (feature level 6, release 0.6.0) is v1's compare-and-set on the upgrade record
(nodeos/cluster/upgrade_map.py `apply_step`) over the steps handover, release, update, rejoin,
sync. Stepping into `release` releases the domain's nodes: the record lists them (`released`)
and each of their secondary replicas leaves its volume's `in_sync` at once, by plan, with a
`replica_out_of_sync` event "released for its update". Their primaries then cut those legs out
of their mirrors while the nodes are still alive (nodeos/agent/legs.py), so no write blocks on a
leg whose node reboots; a released node is neither counted in sync again (failover_map.py
`settle_in_sync`) nor re-added (nodeos/agent/plan.py) while the release lasts.

The release lasts while the upgrade runs and the domain's step is release, update or rejoin
(`failover_map.released_nodes`). It ends when the step goes on past rejoin (to `sync`: the
primaries re-add the legs, md catches them up from its write-intent bitmap, and the step waits
for them to be in sync), and while the upgrade is paused, stopped (it waits for an operator:
the replicas are taken back meanwhile), aborted or done; after a resume the leader steps back
from `update` to `release` while a node not yet handed its update is counted in sync again.

Here, not in upgrade_map, because it changes the storage domain's in-sync sets (the cluster's
modules do not reach into the storage domain: tests/unit/test_layers.py).
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster.upgrade_map import STEPS, apply_step, current, note
from nodeos.storage.failover_map import RELEASED_STEPS, drop_in_sync, in_sync_of

STEPS_V2 = (*STEPS[:1], "release", *STEPS[1:])  # handover, release, update, rejoin, sync
RELEASED_WHY = "released for its update"


def _name(st: dict[str, Any], nid: int) -> str:
    return str((st["nodes"].get(nid) or {}).get("name") or f"node-{nid}")


def release(st: dict[str, Any], up: dict[str, Any]) -> None:
    """The current domain's nodes are released: each leaves every in-sync set it is in as a
    secondary of a ready replicated volume (never the last one: drop_in_sync keeps it)."""
    nodes = [int(n) for n in up["domains"][up["at"]]["nodes"] if n in st["nodes"]]
    up["released"] = nodes
    for uuid in sorted(st["volumes"]):
        vol = st["volumes"][uuid]
        if int(vol.get("replicas") or 1) <= 1 or vol.get("state") != "ready":
            continue
        for nid in nodes:
            if nid != vol["primary"] and nid in in_sync_of(vol):
                drop_in_sync(st, vol, nid, RELEASED_WHY)


def upgrade_step_v2(st: dict[str, Any], a: dict[str, Any]) -> Any:
    up = current(st, a.get("id"))
    out = apply_step(st, a, STEPS_V2)
    if not out["changed"]:
        return out
    if up["step"] == "release":
        release(st, up)
    elif up["step"] not in RELEASED_STEPS and up.get("released"):
        names = ", ".join(_name(st, n) for n in up["released"])
        up["released"] = []
        note(st, up, f"release of {names} ended: their legs are re-added and resynced")
    return out


HANDLERS: dict[str, dict[int, Any]] = {"upgrade_step": {2: upgrade_step_v2}}
