"""Re-placing lost and leaving replicas (pure; the last link of the leader's failover controller,
nodeos/storage/failover.py `decide`).

A secondary of a ready replicated volume is re-placed on another node and copied in full when
- its node has been `down` for `after_s` (config `replace_after_s`, default 600 s) on the
  leader's own clock (a new leader counts from its first look, like leases: the grace may run
  longer across a leader change, never shorter);
- its pool failed (the map's pool, or the node's report of it: a drive of it is missing from
  the machine), or a drive of its pool is missing or failing (SMART: evacuated before it dies),
  or its node failed to create it (a copy re-placed there; it goes elsewhere, not there again);
- its node drains, once no primary is left on that node (drain: primaries first, then replicas).

The new place comes from the placement package: a node that is up, active and not already a
replica of the volume, off the surviving replicas' failure domains at the volume's spread, with
room for a whole leg (copies already in flight are reserved first, so two copies do not both
count the same free space). One copy per volume at a time (a replica not yet in sync on a node
that is up is a copy in flight), never the primary's slot, never when the primary is not in
sync (it is the copy's source), and at most `per_node` copies per node (as source or target)
and `total` in the cluster (pitfall 17: rebuild storms). A placement refusal is returned, for
the shell to log once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from nodeos.dataplane.mirror_names import member_size_bytes
from nodeos.errors import BadInput
from nodeos.storage import capacity, placement
from nodeos.storage.failover_map import in_sync_of
from nodeos.storage.lookup import health_of

DEFAULT_REPLACE_AFTER_S = 600.0
MAX_REPLACE_AFTER_S = 7 * 86400.0
Command = tuple[str, dict[str, Any]]
Refusals = dict[tuple[str, int], str]  # (volume uuid, node of the replica) -> why it stays


@dataclass(frozen=True)
class ReplacePolicy:
    after_s: float = DEFAULT_REPLACE_AFTER_S
    per_node: int = 2
    total: int = 8

    def __post_init__(self) -> None:
        a = self.after_s
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 1.0 <= a <= MAX_REPLACE_AFTER_S:
            raise BadInput(
                f"replace_after_s {a!r} is out of range",
                field="replace_after_s",
                allowed=f"1-{int(MAX_REPLACE_AFTER_S)}",
            )
        for key, v in (("per_node", self.per_node), ("total", self.total)):
            if type(v) is not int or not 1 <= v <= 1000:
                raise BadInput(f"{key} {v!r} is out of range", field=key, allowed="1-1000")


def pool_trouble(pool: dict[str, Any], rep: dict[str, Any]) -> str | None:
    """Why `pool` cannot keep its replicas, by the map and its node's report `rep` (None: fine):
    a drive of it gone from the machine, the pool failed, or a drive SMART calls failing."""
    drives = rep.get("drives") or {}
    where = f"pool {pool['name']} on node {pool['node']}"
    missing, failing = (
        sorted(d for d in pool["drives"] if (drives.get(d) or {}).get("health") == h)
        for h in ("missing", "failing")
    )
    reported = ((rep.get("pools") or {}).get(pool["pool_id"]) or {}).get("state")
    if missing:
        return f"drive {', '.join(missing)} of {where} is missing"
    if pool["state"] == "failed" or reported == "failed":
        return f"{where} failed"
    if failing:
        return f"drive {', '.join(failing)} of {where} is failing"
    return None


def troubled_pools(st: dict[str, Any]) -> dict[tuple[int, str], str]:
    """(node, pool id) -> why, for every pool that failed or has a missing or failing drive."""
    out = {}
    for p in st["pools"].values():
        why = pool_trouble(p, st["reports"].get(p["node"]) or {})
        if why:
            out[(int(p["node"]), str(p["pool_id"]))] = why
    return out


def track_down(st: dict[str, Any], down_since: dict[int, float], now: float) -> None:
    """Since when (leader's clock) each member has been `down`; `up` or gone forgets it."""
    for nid in list(down_since):
        if nid not in st["nodes"] or health_of(st, nid) != "down":
            del down_since[nid]
    for nid in st["nodes"]:
        if health_of(st, nid) == "down":
            down_since.setdefault(nid, now)


def _replicated_ready(vol: dict[str, Any]) -> bool:
    return int(vol.get("replicas") or 1) > 1 and vol["state"] == "ready"


class _Look:
    """What every decision of one call reads, indexed once (a map holds thousands of volumes and
    the controller runs 5 times a second)."""

    def __init__(self, st: dict[str, Any]) -> None:
        self.st = st
        self.pools = {(int(p["node"]), str(p["pool_id"])): p for p in st["pools"].values()}
        self.primaries = {int(v["primary"]) for v in st["volumes"].values() if _replicated_ready(v)}
        # Nodes where an in-sync replica may have to go (down, draining, a pool in trouble): any
        # other in-sync replica stays without a closer look.
        self.troubled = troubled_pools(st)
        self.suspect = {n for n in st["nodes"] if health_of(st, n) != "up" or self.draining(n)} | {
            n for (n, _) in self.troubled
        }

    def draining(self, nid: int) -> bool:
        return (self.st["nodes"].get(nid) or {}).get("state") == "draining"

    def trouble(self, vol: dict[str, Any], nid: int, pool_id: str) -> str | None:
        """What says the replica on `nid` (up) cannot come back where it is: its pool failed or
        has a failing drive, or the node failed to make it (a re-placed copy that could not be
        created goes elsewhere rather than being tried again and again)."""
        rep = self.st["reports"].get(nid) or {}
        own = (rep.get("replicas") or {}).get(vol["uuid"]) or {}
        if own.get("state") == "failed" and own.get("step"):
            return f"node {nid} could not make its replica ({own['step']}: {own.get('error') or 'failed'})"
        return self._pool_trouble(nid, pool_id)

    def _pool_trouble(self, nid: int, pool_id: str) -> str | None:
        if (nid, pool_id) not in self.pools:
            return f"its pool {pool_id} is gone"
        return self.troubled.get((nid, pool_id))

    def why(
        self,
        vol: dict[str, Any],
        slot: dict[str, Any],
        down_since: dict[int, float],
        now: float,
        policy: ReplacePolicy,
    ) -> str | None:
        """Why the secondary in `slot` should be re-placed now (None: it stays)."""
        nid = int(slot["node"])
        if nid == vol["primary"]:
            return None
        draining = self.draining(nid)
        if draining and nid in self.primaries:
            return None  # primaries move first
        if health_of(self.st, nid) == "down":
            if draining:
                return f"node {nid} drains (and is down)"  # leaving anyway: no grace
            since = down_since.get(nid)
            if since is None or now - since < policy.after_s:
                return None
            return f"node {nid} has been down for {now - since:.0f} s"
        trouble = self.trouble(vol, nid, str(slot["pool_id"]))
        if trouble:
            return trouble
        return f"node {nid} drains" if draining else None

    def copying(self, vol: dict[str, Any]) -> list[int]:
        """Nodes of `vol` being copied to: not in sync, up, not draining and not on a failed
        pool or drive (a leg there is re-placed instead of waiting for its copy)."""
        cur = set(in_sync_of(vol))
        return [
            int(s["node"])
            for s in vol["placement"]
            if s["node"] != vol["primary"]
            and s["node"] not in cur
            and health_of(self.st, s["node"]) == "up"
            and not self.draining(int(s["node"]))
            and self.trouble(vol, int(s["node"]), str(s["pool_id"])) is None
        ]


def replace_commands(
    st: dict[str, Any], down_since: dict[int, float], now: float, policy: ReplacePolicy
) -> tuple[list[Command], Refusals]:
    """`volume_replace_replica` commands for the replicas to re-place now, and the refusals."""
    look = _Look(st)
    if not look.suspect and all(
        v.get("in_sync") is None or len(v["in_sync"]) == len(v["placement"]) for v in st["volumes"].values()
    ):
        return [], {}  # the common case: every replica in sync, nothing down, draining or failing
    load: dict[int, int] = {}
    busy: list[tuple[dict[str, Any], list[int]]] = []
    wanted: list[tuple[dict[str, Any], dict[str, Any], str]] = []
    for uuid in sorted(st["volumes"]):
        vol = st["volumes"][uuid]
        if not _replicated_ready(vol):
            continue
        copying = look.copying(vol)
        if copying:
            busy.append((vol, copying))
            for n in copying:  # each copy loads its target and its source, the primary
                for end in (n, int(vol["primary"])):
                    load[end] = load.get(end, 0) + 1
            continue
        if vol.get("freeze") or vol["primary"] not in in_sync_of(vol):
            continue
        cur = set(in_sync_of(vol))
        for slot in vol["placement"]:
            if slot["node"] in cur and slot["node"] not in look.suspect:
                continue  # in sync where nothing is wrong (the common case: no closer look)
            why = look.why(vol, slot, down_since, now, policy)
            if why is not None:
                wanted.append((vol, slot, why))
                break  # one copy per volume at a time
    if not wanted:
        return [], {}
    in_flight = sum(len(c) for _, c in busy)
    index = placement.CapacityIndex(capacity.candidates(st))
    for vol, copying in busy:  # copies in flight will fill their legs: count them as taken
        for n in copying:
            slot = next(s for s in vol["placement"] if s["node"] == n)
            size = member_size_bytes(vol["size_bytes"])
            with contextlib.suppress(BadInput):  # already over: the node simply gets nothing more
                index.reserve([placement.ReplicaSlot(n, str(slot["pool_id"]))], size)
    down = {n for n in st["nodes"] if health_of(st, n) != "up"}
    out: list[Command] = []
    refused: Refusals = {}
    for vol, slot, why in wanted:
        if in_flight >= policy.total:
            break
        old, prim = int(slot["node"]), int(vol["primary"])
        if load.get(prim, 0) >= policy.per_node:
            continue
        nodes = {int(s["node"]) for s in vol["placement"]}
        capped = {n for n, k in load.items() if k >= policy.per_node}
        try:
            (got,) = index.place(
                vol["uuid"],
                member_size_bytes(vol["size_bytes"]),
                1,
                vol.get("spread", "node"),
                exclude_nodes=nodes | down | capped,
                avoid_domains_of=nodes - {old},
                reserve=True,
            )
        except BadInput as err:
            refused[(vol["uuid"], old)] = (
                f"volume {vol['name']}: replica on node {old} ({why}) stays: {err.message}"
            )
            continue
        args = {
            "uuid": vol["uuid"],
            "epoch": vol["epoch"],
            "old": old,
            "node": got.node_id,
            "pool_id": got.pool_id,
            "reason": why,
        }
        out.append(("volume_replace_replica", args))
        in_flight += 1
        for n in (got.node_id, prim):
            load[n] = load.get(n, 0) + 1
    return out, refused
