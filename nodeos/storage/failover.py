"""The leader's failover controller (pure): leases and the map in, commands out.

Leases. Every node's agent renews its lease at the leader every `renew_s`
(nodeos/agent/lease.py). The leader grants a renewal only after a read barrier, so a grant
comes from a leader a quorum still follows. The node counts its lease from the moment it
*sent* the request that was granted and fences itself (every primary's front end ANA
inaccessible, so the target refuses its I/O) at `fence_after_s`, before the lease ends. The
leader counts from the moment it *received* the request, which is later, and adds
`drift_s` for clock rate differences: when it calls the node down, the node has fenced
itself. A new leader does not know the old one's grants, so it counts every lease from its
own first moment as leader, and from an earlier moment once a majority of voters said when they
last acknowledged an older leader (`Leases.floor`, nodeos/cluster/leader_contact.py: every older
grant was sent before it): a lost leader that was also a primary costs its lease, not an
election timeout plus its lease.

Decisions, each a map command the shell proposes (one at a time, re-deciding on the map as
applied, so nothing is decided twice):
- `node_health down` for a node whose lease ran out (`lease_verdict`), at once when the
  leader's Raft has lost contact with it or its data plane is reported down; a node whose lease
  ran out but whose Raft member still acknowledges the leader (slow, not dead: its renewals are
  late) is *suspect* for at most `suspect_grace_s` more (one `record_event` `node_suspect`)
  and called down only then, unless it renews meanwhile. The old lease has run out either way:
  suspicion only delays a failover, it never makes one earlier. A suspect node that is the
  primary only of volumes with nothing to fail over to (no other in-sync replica on a node that
  is up: `held_volumes`) stays suspect past the grace, for as long as its Raft member answers
  (issue 29): calling it down would stop those volumes and gain nothing. Its node keeps them
  unfenced meanwhile (nodeos/agent/lease.py `sole_primaries`);
- `node_health up` once it has renewed steadily for `up_after_s` (hysteresis: a node that
  renews in fits does not flap);
- `volume_failover` for a replicated volume whose primary is down and whose lease ran out by
  this leader's own table, to the first in-sync
  replica (placement order) on a node that is up. With no such replica the volume waits
  for its last in-sync replica to return: a stale copy is never promoted;
- planned moves off draining nodes and off pools in trouble: a drive of the primary's own leg
  pulled, dead or failing (`volume_handoff`, then `volume_failover`; the old primary is then a
  secondary on a troubled pool and is re-placed below);
- `volume_replace_replica` for a secondary lost past a grace, on a failed pool or drive, or on
  a draining node (nodeos/storage/replace.py), once nothing above is left to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeos.cluster import upgrade_map
from nodeos.errors import BadInput
from nodeos.storage.create_replace import create_replace_commands
from nodeos.storage.failover_map import handed_off, in_sync_of
from nodeos.storage.lookup import health_of
from nodeos.storage.publish_replace import publish_replace_commands
from nodeos.storage.replace import Refusals, ReplacePolicy, replace_commands, track_down, troubled_pools

DEFAULT_LEASE_S = 2.0  # issue 29: failover within 3 s (was 3.0)
Command = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class LeaseTiming:
    lease_s: float = DEFAULT_LEASE_S

    def __post_init__(self) -> None:
        if not isinstance(self.lease_s, (int, float)) or not 1.0 <= self.lease_s <= 60.0:
            raise BadInput(f"lease_s {self.lease_s!r} is out of range", field="lease_s", allowed="1.0-60.0")

    @property
    def renew_s(self) -> float:
        return self.lease_s / 6

    @property
    def fence_after_s(self) -> float:
        """The node fences itself this long after sending its last granted renewal."""
        return self.lease_s * 0.8

    @property
    def drift_s(self) -> float:
        return 0.1 * self.lease_s + 0.2

    @property
    def down_after_s(self) -> float:
        """The leader calls a node down this long after its last renewal arrived."""
        return self.lease_s + self.drift_s

    @property
    def up_after_s(self) -> float:
        return 2 * self.lease_s

    @property
    def suspect_grace_s(self) -> float:
        """How much longer than `down_after_s` a node still in Raft contact gets."""
        return self.lease_s

    @property
    def contact_s(self) -> float:
        """Raft contact at most this old (as the leader sampled it) counts as alive."""
        return self.lease_s / 2


@dataclass
class Leases:
    """What the leader knows of renewals, on its own monotonic clock (volatile: a new leader
    starts empty, counting from `start()`)."""

    leader_since: float
    last: dict[int, float] = field(default_factory=dict)  # node -> last renewal received
    steady_since: dict[int, float] = field(default_factory=dict)  # start of its unbroken renewals
    seen: dict[int, float] = field(default_factory=dict)  # when this leader first saw it a member
    looked: bool = False  # members present at the first look count from start()
    down_since: dict[int, float] = field(default_factory=dict)  # when this leader first saw it down
    contact: dict[int, float] = field(default_factory=dict)  # node -> last seen active by this leader's Raft
    suspect: dict[int, float] = field(default_factory=dict)  # node -> when its lease ran out while in contact
    held: set[int] = field(default_factory=set)  # suspects kept up past the grace, said so this episode
    refused: Refusals = field(default_factory=dict)  # replicas a re-placement found no room for

    floor: float | None = None  # every older leader's grant was sent before this (lease_floor)

    def observe(self, members: Any, now: float) -> None:
        for nid in members:  # members at the first look count from start() (-inf: no later)
            self.seen.setdefault(nid, now if self.looked else float("-inf"))
        self.looked = True

    def start(self) -> float:
        """Where a lease this leader never renewed counts from: its own start, or earlier once the
        voters told it when they last acknowledged an older leader (nodeos/cluster/leader_contact.py)."""
        return self.leader_since if self.floor is None else min(self.floor, self.leader_since)

    def renewed(self, nid: int, now: float, timing: LeaseTiming) -> None:
        prev = self.last.get(nid)
        if prev is None or now - prev > 2 * timing.renew_s + timing.drift_s:
            self.steady_since[nid] = now
        self.last[nid] = now

    def heard(self, nids: Iterable[int], now: float) -> None:
        """This leader's Raft saw these nodes active (acknowledging its appends or heartbeats)."""
        for nid in nids:
            self.contact[nid] = now

    def since(self, nid: int) -> float:
        """Where this node's lease counts from on this leader's clock: its last renewal, or,
        without one, this leader's start (a member that joined later: from when it was seen)."""
        start = self.start()
        return max(self.last.get(nid, start), start, self.seen.get(nid, start))

    def expired(self, nid: int, now: float, timing: LeaseTiming) -> bool:
        """The node's lease ran out: it has fenced itself. The one safety test of a failover."""
        return now - self.since(nid) > timing.down_after_s

    def in_contact(self, nid: int, now: float, timing: LeaseTiming) -> bool:
        seen = self.contact.get(nid)
        return seen is not None and now - seen <= timing.contact_s

    def steady(self, nid: int, now: float, timing: LeaseTiming) -> bool:
        last = self.last.get(nid)
        if last is None or now - last > 2 * timing.renew_s + timing.drift_s:
            return False
        return now - self.steady_since.get(nid, now) >= timing.up_after_s


def active_peers(progress: Mapping[int, Any], me: int) -> list[int]:
    """The members a leader's Raft progress tracker saw active since its last quorum check
    (`recent_active`, reset every election timeout): what `Leases.heard` takes."""
    return sorted(nid for nid, pr in progress.items() if nid != me and pr.recent_active)


def in_contact_now(progress: Mapping[int, Any], me: int) -> list[int]:
    """What `Leases.heard` takes at each look: the active peers and the leader itself, whose Raft
    member answers by leading. Without itself, a leader whose own renewals run late (its read
    barrier slow on a starved machine) was called down at once, as a dead node, never suspect
    nor held (issue 29's lab: "the leader calls even itself down")."""
    return sorted({*active_peers(progress, me), me})


def dataplane_down(st: dict[str, Any], nid: int) -> bool:
    """The node's last report names a data plane error (down, nodeos/node/dpwatch.py: it then
    withholds its renewals on purpose; or a capacity read failed)."""
    dp = ((st.get("reports") or {}).get(nid) or {}).get("dataplane") or {}
    return bool(dp.get("error"))


def lease_verdict(
    st: dict[str, Any], leases: Leases, nid: int, now: float, timing: LeaseTiming
) -> tuple[str, str]:
    """`ok`, `suspect`, `held` or `down` for a node the map calls up, and why.

    Down once its lease ran out (`down_after_s` after its last renewal arrived) when this
    leader's Raft has not seen it active for `contact_s` (dead, stopped, cut off) or its report
    says its data plane is down (it withholds renewals on purpose); otherwise suspect, and down
    `suspect_grace_s` later. A slow node (renewals late, Raft answering) is so not flapped down
    and up; a node whose lease keeper alone is stuck has fenced itself and is called down one
    grace later than a dead one.

    `held`: past the grace, a node still in contact whose primaries all lack a failover target
    (`held_volumes`) stays suspect: its `down` would fail nothing over (there is nobody to
    promote) and only stop those volumes (issue 29: a starved lab flapped the last in-sync
    primary of a volume for 20 minutes). Holding only delays a `down`, as the grace does: the
    failover rules are untouched. Once one of its volumes has somewhere to go, or its Raft
    member falls silent, it is called down as before.
    """
    if not leases.expired(nid, now, timing):
        return "ok", ""
    last = leases.last.get(nid)
    why = (
        f"no lease renewal for {now - last:.1f} s"
        if last is not None
        else f"no lease renewal for at least {now - leases.start():.1f} s (this leader took over "
        f"{now - leases.leader_since:.1f} s ago)"
    )
    if dataplane_down(st, nid):
        return "down", f"{why}; its data plane is down"
    if not leases.in_contact(nid, now, timing):
        return "down", why
    over = now - leases.since(nid) - timing.down_after_s
    if over <= timing.suspect_grace_s:
        return "suspect", f"{why}, but its Raft member still answers the leader"
    hold = held_volumes(st, nid)
    if hold:
        return "held", f"{why}, but its Raft member still answers the leader; {hold_reason(hold)}"
    return "down", f"{why}, although its Raft member still answers the leader (suspect for {over:.1f} s)"


def held_volumes(st: dict[str, Any], nid: int) -> list[str]:
    """The names of the volumes node `nid` is primary of, when calling it down gains nothing:
    none of its (ready, replicated) primaries has another in-sync replica on a node that is up
    to fail over to. Empty when it is primary of nothing, or when one of them could move."""
    names: list[str] = []
    for uuid in sorted(st["volumes"]):
        vol = st["volumes"][uuid]
        if vol["primary"] != nid or int(vol.get("replicas") or 1) <= 1 or vol["state"] != "ready":
            continue
        if failover_target(st, vol) is not None:
            return []  # this one has somewhere to go: the node is called down as before
        names.append(str(vol["name"]))
    return names


def hold_reason(names: list[str]) -> str:
    return (
        f"it holds the only in-sync replica of {', '.join(names)} (nothing to fail over to): "
        "not called down while its Raft member answers"
    )


def health_commands(st: dict[str, Any], leases: Leases, now: float, timing: LeaseTiming) -> list[Command]:
    out: list[Command] = []
    leases.observe(st["nodes"], now)
    for nid in sorted(st["nodes"]):
        health = health_of(st, nid)
        if health == "up":
            verdict, why = lease_verdict(st, leases, nid, now, timing)
            if verdict == "down":
                out.append(("node_health", {"node_id": nid, "health": "down", "reason": why}))
            elif verdict == "suspect" and nid not in leases.suspect:
                leases.suspect[nid] = now
                hold = held_volumes(st, nid)
                if hold:  # said at once: it will not be called down at the grace's end
                    leases.held.add(nid)
                    why = f"{why}; {hold_reason(hold)}"
                out.append(("record_event", suspect_event(st, nid, why, timing, held=bool(hold))))
            elif verdict == "held" and nid not in leases.held:
                leases.suspect.setdefault(nid, now)
                leases.held.add(nid)
                out.append(("record_event", suspect_event(st, nid, why, timing, held=True)))
            if verdict not in ("suspect", "held"):
                leases.suspect.pop(nid, None)
                leases.held.discard(nid)
        elif health == "down" and leases.steady(nid, now, timing):
            out.append(("node_health", {"node_id": nid, "health": "up", "reason": "renews its lease again"}))
    return out


def suspect_event(
    st: dict[str, Any], nid: int, why: str, timing: LeaseTiming, held: bool = False
) -> dict[str, Any]:
    """The `node_suspect` event (without `at`: the shell stamps its wall clock)."""
    name = (st["nodes"].get(nid) or {}).get("name") or f"node-{nid}"
    msg = f"node {name} is suspect: {why}"
    if not held:
        msg += f"; called down in {timing.suspect_grace_s:.1f} s unless it renews"
    return {"kind": "node_suspect", "severity": "warning", "message": msg, "node": nid, "reason": why}


def _draining(st: dict[str, Any], nid: int) -> bool:
    return (st["nodes"].get(nid) or {}).get("state") == "draining"


def failover_target(
    st: dict[str, Any],
    vol: dict[str, Any],
    planned: bool = False,
    troubled: dict[tuple[int, str], str] | None = None,
) -> int | None:
    """The replica to promote: the first in-sync one, in placement order, on a node that is
    up; one on a draining node only when nothing else is (and never for a planned move). A
    planned move never goes to a replica whose pool is in `troubled` either."""
    cur = set(in_sync_of(vol))
    bad = troubled or {}
    fits = [
        int(s["node"])
        for s in vol["placement"]
        if s["node"] != vol["primary"]
        and s["node"] in cur
        and health_of(st, s["node"]) == "up"
        and not (planned and (int(s["node"]), str(s["pool_id"])) in bad)
    ]
    staying = [n for n in fits if not _draining(st, n) and not upgrade_map.handing_over(st, n)]
    if staying:
        return staying[0]
    return None if planned or not fits else fits[0]


def primary_trouble(
    st: dict[str, Any], vol: dict[str, Any], troubled: dict[tuple[int, str], str]
) -> str | None:
    """Why the primary of `vol` should move away while it is up: its node drains, or the pool
    of its own leg failed or has a missing or failing drive (its mirror still serves from the
    other legs, but its slot is re-placed only once it is a secondary)."""
    prim = vol["primary"]
    if _draining(st, prim):
        return f"node {prim} drains"
    if upgrade_map.handing_over(st, prim):
        return f"node {prim} is being upgraded"
    pool_id = next((str(s["pool_id"]) for s in vol["placement"] if s["node"] == prim), None)
    return troubled.get((int(prim), pool_id)) if pool_id is not None else None


def drain_commands(st: dict[str, Any]) -> list[Command]:
    """Planned moves off draining nodes and off pools in trouble (a drive pulled, dead or
    failing): hand off first, fail over once the old primary confirmed it stopped serving (its
    report at the volume's epoch)."""
    out: list[Command] = []
    troubled = troubled_pools(st)
    for uuid in sorted(st["volumes"]):
        vol = st["volumes"][uuid]
        prim = vol["primary"]
        if int(vol.get("replicas") or 1) <= 1 or vol["state"] != "ready":
            continue
        why = primary_trouble(st, vol, troubled)
        if why is None or health_of(st, prim) != "up":
            continue  # nothing to move, or the unplanned path takes it
        ho = vol.get("handoff")
        if ho is None or ho.get("epoch") != vol["epoch"]:
            to = failover_target(st, vol, planned=True, troubled=troubled)
            if to is not None:
                out.append(("volume_handoff", {"uuid": uuid, "epoch": vol["epoch"], "to": to}))
        elif handed_off(st, vol):
            args = {"uuid": uuid, "epoch": vol["epoch"], "to": ho["to"], "reason": why}
            args["planned"] = True
            out.append(("volume_failover", args))
    return out


def failover_commands(st: dict[str, Any], leases: Leases, now: float, timing: LeaseTiming) -> list[Command]:
    """Volumes whose primary is down in the map *and* whose lease ran out by this leader's
    table: `down` may have been decided by an earlier leader, or before a renewal this leader
    granted since (the node may be serving again), so the map alone does not prove the old
    primary has fenced itself (found by the failover simulator: two writable primaries)."""
    out: list[Command] = []
    for uuid in sorted(st["volumes"]):
        vol = st["volumes"][uuid]
        if int(vol.get("replicas") or 1) <= 1 or vol["state"] != "ready":
            continue
        if health_of(st, vol["primary"]) != "down" or not leases.expired(vol["primary"], now, timing):
            continue
        to = failover_target(st, vol)
        if to is None:
            continue  # the volume waits for its last in-sync replica (never a stale copy)
        reason = f"node {vol['primary']} is down"
        out.append(("volume_failover", {"uuid": uuid, "epoch": vol["epoch"], "to": to, "reason": reason}))
    return out


def decide(
    st: dict[str, Any],
    leases: Leases,
    now: float,
    timing: LeaseTiming,
    policy: ReplacePolicy = ReplacePolicy(),  # noqa: B008 (frozen)
) -> list[Command]:
    """Health changes first: a failover is decided only on a `down` the map has applied;
    re-placements last, only once no primary is left to move (with them, the replicas of new
    volumes a node failed to make)."""
    track_down(st, leases.down_since, now)
    out = (
        health_commands(st, leases, now, timing)
        or failover_commands(st, leases, now, timing)
        or drain_commands(st)
    )
    if out:
        return out
    out, leases.refused = replace_commands(st, leases.down_since, now, policy)
    return out + create_replace_commands(st) + publish_replace_commands(st)


def unavailable(st: dict[str, Any]) -> list[str]:
    """Volumes whose primary is down and that have no in-sync replica to promote."""
    return sorted(
        vol["name"]
        for vol in st["volumes"].values()
        if int(vol.get("replicas") or 1) > 1
        and vol["state"] == "ready"
        and health_of(st, vol["primary"]) == "down"
        and failover_target(st, vol) is None
    )
