"""Failover sections of the cluster map: node health, the in-sync set and ownership changes.

The in-sync bookkeeping that storage_map's report settling calls, and what the failover
commands' handlers (nodeos/storage/failover_handlers.py, registered by nodeos/cluster/map.py)
check; it imports no other section of the map, so every section, decision and agent may read it.

- `nodes[nid].health` ("up" | "down", absent = up) is written by the leader's controller
  (nodeos/storage/failover.py): down once the node's lease ran out (it has fenced itself), up
  once it renews again.
- `volumes[uuid].in_sync` lists the nodes whose replica holds every acknowledged write. It
  starts as every placement node (legs are created equal), loses a secondary the primary's
  mirror reports failed or missing and a secondary whose node is down, loses the old primary
  at a failover (its leg may be one write ahead: it is copied in full when it returns), and
  regains a node once the current primary's mirror reports its leg in sync. It is never
  emptied: the last in-sync replica is the only copy known to hold everything.
- A node a rolling upgrade released for its update (`released_nodes`: the domain being updated,
  from the `release` step on, nodeos/cluster/upgrade_map.py) left every `in_sync` when it was
  released, and is not counted again while released, whatever its primary reports: its
  primaries cut its legs while it is still alive and re-add them once the release ends.
- `volume_failover` moves a volume's primary to an in-sync replica and bumps its epoch; every
  node's agent follows (nodeos/agent/plan.py: retarget, promote, demote). The command carries
  the epoch it was decided at, so a decision overtaken by another is refused at apply.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.errors import NotFound, OperationFailed
from nodeos.storage.lookup import health_of

HEALTH = ("up", "down")
MEMBER_OUT = ("failed", "missing")


def in_sync_of(vol: dict[str, Any]) -> list[int]:
    """The volume's in-sync set; a volume from before the field: every placement node."""
    got = vol.get("in_sync")
    return list(got) if got is not None else [s["node"] for s in vol["placement"]]


RELEASED_STEPS = ("release", "update", "rejoin")  # the steps a released domain is released in


def released_nodes(st: dict[str, Any]) -> set[int]:
    """The nodes a rolling upgrade released for their update: their replicas are out of sync by
    plan (their primaries cut the legs while they are alive) while the upgrade runs and the
    domain's step is release, update or rejoin. A pause, a stop (it waits for an operator, maybe
    for hours: the replicas are taken back meanwhile), an abort or the step after rejoin ends it;
    a resume releases again (nodeos/update/rolling.py). Only `upgrade_step` v2 (feature level 6)
    writes `released`: a map whose upgrade went by v1 has no released node."""
    up = st.get("upgrade") or {}
    if up.get("state") != "running" or up.get("step") not in RELEASED_STEPS:
        return set()
    return {int(n) for n in up.get("released") or []}


def _set_in_sync(vol: dict[str, Any], nodes: list[int]) -> None:
    order = [s["node"] for s in vol["placement"]]
    vol["in_sync"] = [n for n in order if n in set(nodes)]


def drop_in_sync(st: dict[str, Any], vol: dict[str, Any], nid: int, why: str | None) -> None:
    """`why` None: the report that dropped it is already an event (replica_failed)."""
    cur = in_sync_of(vol)
    if nid not in cur or len(cur) <= 1:
        return  # never empty: the last one is the only copy known to hold every write
    _set_in_sync(vol, [n for n in cur if n != nid])
    if why is None:
        return
    map_events.record(
        st,
        "replica_out_of_sync",
        f"volume {vol['name']}: replica on node {nid} left the in-sync set ({why})",
        severity="warning",
        volume=vol["uuid"],
        node=nid,
        epoch=vol["epoch"],
    )


def settle_in_sync(st: dict[str, Any], vol: dict[str, Any]) -> None:
    """Fold the current primary's mirror report into `in_sync` (storage_map calls it for a
    volume whenever one of its nodes reports). Only a report made at the volume's epoch
    counts: an old primary's late report says nothing about the new mirror."""
    if int(vol.get("replicas") or 1) <= 1 or vol["state"] not in ("ready", "creating"):
        return
    prim = vol["primary"]
    rep = ((st["reports"].get(prim) or {}).get("replicas") or {}).get(vol["uuid"])
    if not rep or rep.get("epoch", vol["epoch"]) != vol["epoch"] or rep.get("state") == "failed":
        return
    members = rep.get("members") or {}
    cur = in_sync_of(vol)
    released = released_nodes(st)
    for slot in vol["placement"]:
        nid = slot["node"]
        state = members.get(nid)
        if nid == prim or state is None:
            continue
        if state == "in-sync" and nid not in cur and health_of(st, nid) == "up" and nid not in released:
            _set_in_sync(vol, [*cur, nid])  # the report's own event says so (rebuild_finished)
            cur = in_sync_of(vol)
        elif state in MEMBER_OUT and nid in cur and vol["state"] == "ready":
            drop_in_sync(st, vol, nid, None)
            cur = in_sync_of(vol)
    if vol.get("in_sync") is None:
        vol["in_sync"] = cur


# --- what the failover commands check (nodeos/storage/failover_handlers.py applies them) ------


def volume_of(st: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The volume a leader's decision names by `uuid`."""
    uuid = args.get("uuid")
    vol = st["volumes"].get(uuid) if isinstance(uuid, str) else None
    if vol is None:
        raise NotFound(f"volume {uuid!r} does not exist", field="uuid")
    return vol


def volume_at_epoch(st: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The volume, if the decision was taken at its current epoch (else it is stale)."""
    vol, epoch = volume_of(st, args), args.get("epoch")
    if epoch != vol["epoch"]:
        msg = f"volume {vol['name']} is at epoch {vol['epoch']}, the decision was taken at {epoch!r}"
        raise OperationFailed(msg, field="epoch")
    return vol


def handed_off(st: dict[str, Any], vol: dict[str, Any]) -> bool:
    """The primary's own report confirms it stopped serving the volume at its epoch."""
    rep = ((st["reports"].get(vol["primary"]) or {}).get("replicas") or {}).get(vol["uuid"]) or {}
    return rep.get("handed_off") == vol["epoch"]


REBUILD_MBPS_MAX = 100_000  # a node's rebuild cap, MB/s (failover_handlers.py)
