"""When a primary calls a blocked leg failed, and when it may take it out of its mirror (pure).

Replica legs attach with no fast-fail and no controller loss (`RemoteSpec`): when a replica
cannot be reached, the leg's I/O blocks (nvme requeues it) and md holds every write, since each
write goes to every leg; md never degrades on its own over a network loss. The primary's agent:

1. reports a leg failed once its controller has not been live for LEG_DOWN_S (one reconnect
   attempt, `reconnect_delay` 2 s, plus 1 s; the controller leaves `live` only after keep-alive
   found the path dead, 5-7.5 s after the cut), so the leader drops that replica from `in_sync`;
2. takes the leg out (md fails it, its controllers are deleted so the held writes complete on
   the other legs) only once the map, at this volume's epoch, no longer counts the replica in
   sync, and no report of its own still in flight may make it count it again.
A controller that comes back live before step 2 simply goes on: its leg never left md.

A node a rolling upgrade released for its update (nodeos/storage/failover_map.py
`released_nodes`) is cut the same way but at once, its controller live: the map no longer counts
it in sync by plan, and nothing it reports makes the map count it again while it is released
(`released_legs`). The primary re-adds it once the release ends (nodeos/agent/plan.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeos.dataplane.mirror_names import replica_nqn
from nodeos.storage.failover_map import in_sync_of, released_nodes

LEG_DOWN_S = 3.0

# A report sent and maybe not applied yet: its seq, and per volume uuid the nodes it calls in sync.
Sent = tuple[int, Mapping[str, Iterable[int]]]


def not_live_since(prev: Mapping[str, float], remotes: Iterable[Any], now: float) -> dict[str, float]:
    """nqn -> when its controller was first seen not live (connecting, resetting, ...), for the
    replica controllers that are not live now; `prev` is the last answer. A live controller, or
    one that is gone (md sees its device missing), is not listed."""
    return {r.nqn: prev.get(r.nqn, now) for r in remotes if r.state != "live"}


def down_nodes(
    rec: dict[str, Any], since: Mapping[str, float], now: float, bound: float = LEG_DOWN_S
) -> set[int]:
    """Nodes of the primary record `rec` whose leg's controller has not been live for longer than
    `bound`: reported failed."""
    out = set()
    for r in rec.get("remotes") or []:
        t = since.get(replica_nqn(rec["uuid"], str(r["node"])))
        if t is not None and now - t > bound:
            out.add(int(r["node"]))
    return out


def released_legs(st: dict[str, Any], rec: dict[str, Any], attached: Iterable[str]) -> set[int]:
    """Nodes released for their update whose leg of primary record `rec` is still attached
    (`attached`: the NQNs of the replica controllers this node holds): to be cut at once."""
    released = released_nodes(st)
    nqns = set(attached)
    return {
        int(r["node"])
        for r in rec.get("remotes") or []
        if int(r["node"]) in released and replica_nqn(rec["uuid"], str(r["node"])) in nqns
    }


def counted_in_sync(
    vol: dict[str, Any],
    me: int,
    held: dict[str, Any] | None,
    sent: Iterable[Sent],
    released: Iterable[int] = (),
) -> set[int]:
    """The replicas of map volume `vol` (other than me) that the map counts in sync, or may count
    once something already said lands: a report of mine in flight (its seq above the one the
    map holds: newer reports replace older ones) or the one it holds (folded again when another
    node reports). A `released` node is counted only if the map counts it now: no report
    makes the map count it again while it is released."""
    need = set()
    held_seq = int((held or {}).get("seq") or 0)
    for seq, called in sent:
        if seq > held_seq:
            need |= {int(n) for n in called.get(vol["uuid"], ())}
    rep = ((held or {}).get("replicas") or {}).get(vol["uuid"]) or {}
    if int(rep.get("epoch") or 0) == int(vol["epoch"]):
        need |= {int(k) for k, v in (rep.get("members") or {}).items() if v == "in-sync"}
    need = (need - {int(n) for n in released}) | {int(n) for n in in_sync_of(vol)}
    need.discard(me)
    return need


def in_sync_called(members: Mapping[int, str]) -> list[int]:
    """The nodes a report's `members` calls in sync (what `Sent` keeps)."""
    return sorted(int(n) for n, s in members.items() if s == "in-sync")


def removable(
    vol: dict[str, Any] | None,
    rec: dict[str, Any],
    me: int,
    down: Iterable[int],
    held: dict[str, Any] | None,
    sent: Iterable[Sent],
    released: Iterable[int] = (),
) -> list[int]:
    """The down (or `released`) legs the primary may take out of its mirror now: the map holds
    this volume at the record's epoch with me as primary, and counts none of them in sync (nor
    may it soon)."""
    if vol is None or int(vol["primary"]) != me or int(vol["epoch"]) != int(rec.get("epoch") or 0):
        return []
    counted = counted_in_sync(vol, me, held, list(sent), released)
    return sorted(n for n in set(down) | set(released) if n not in counted and n != me)


def pending(
    vol: dict[str, Any] | None,
    rec: dict[str, Any],
    me: int,
    legs: Mapping[int, str],
    held: dict[str, Any] | None = None,
    sent: Iterable[Sent] = (),
    released: Iterable[int] = (),
) -> list[int]:
    """Nodes whose leg md failed while the map counts them in sync, or may once a report of mine
    lands: the primary holds its writes (legwatch). A `released` node's leg, cut on purpose, is
    not held for once the map no longer counts it."""
    if vol is None or vol["primary"] != me or vol["epoch"] != rec.get("epoch"):
        return []
    counted = counted_in_sync(vol, me, held, list(sent), released)
    return sorted(n for n, state in legs.items() if state == "failed" and n in counted and n != me)
