"""The node's side of its lease: renew at the leader, fence itself before the lease runs out.

Every `renew_s` the node asks the leader to renew its lease (nodeos/control/failover_loop.py).
A granted renewal makes the lease valid until the moment the request was *sent* plus
`lease_s` (the leader counts from when it arrived, later, so the node's view ends first).
Past `fence_after_s` without a granted renewal the node fences itself: every primary's front
end goes ANA inaccessible, so the target refuses host I/O there, before the leader may call
the node down and promote another replica (nodeos/storage/failover.py). A renewal granted
again lifts the fence, but only when the grant says the node is up and the node's own map has
applied what the leader's had at the grant: a node the leader called down may have had its
volumes failed over (it stays fenced until the leader calls it up), and a node whose map is
behind may still believe it is the primary of a volume that moved (found by the simulator's
failover workload: two writable primaries). A grant saying down fences at once.

A node starts fenced: after a restart it may have been replaced as primary while it was gone.

**The only in-sync replica is not fenced** (issue 29; `sole_primaries`, `kept_open`). A fence
exists so that the leader may promote another replica once the lease ran out. A volume whose
only in-sync replica is this primary has nobody to promote: fencing it protects nothing and
stops the volume (a starved lab flapped such a primary for 20 minutes: "no usable path"). So,
once this life has caught up (a grant came and the map reached its index), a fence leaves out
every ready replicated volume this node is primary of, in its last applied map, for which no
other replica is counted in sync, nor may be once something this node said lands (its report
held in the map or one in flight: `legs.counted_in_sync`). Why that is safe, i.e. no other node
can become a writable primary of it before this node fences it:
- a failover (and a planned hand-over) promotes only a member of the volume's `in_sync` set
  (checked at apply, nodeos/storage/failover_map.py), and nothing else makes a primary: there
  is no operator-forced promotion, and a re-placed replica joins `in_sync` only later;
- `in_sync` gains a member only from the current primary's own report, at the volume's epoch
  (`settle_in_sync`; a report of another node, an old epoch or an older seq adds nobody): while
  the set is this primary alone, only this node can make it two;
- this node makes no such report while it holds no good lease (`reportable`: out of standing a
  leg the map does not count in sync is reported `syncing`, decided in the same step that
  records the report as sent), and a report made in standing that calls a leg in sync counts
  (`counted_in_sync`) from before it leaves until the map holds a newer one: from then on the
  volume is fenced like any other at the next lapse, before the leader's lease runs out;
- a map behind the leader's changes none of this: everything that could give the volume a
  second in-sync replica goes through this node's reports. A grant that says down changes
  none of it either (the leader has nobody to promote), so a node called down for its other
  volumes keeps serving these (the leader keeps such a node up when these are all it is
  primary of: nodeos/storage/failover.py `held_volumes`);
- published read-only volumes are never fenced (no primary, no epoch) and are not concerned;
  volumes that are not replicated are never fenced at all.
What is lost: while kept open the volume has no redundancy (it had none), and a rebuilt leg
rejoins `in_sync` only once the node holds a good lease again (reported in standing).
Left open: a report of this node's previous life that is still in flight after this life
caught up (a request stuck in the leader's queue across a restart and a grant) could add a
member unseen; the leg watch lives with the same residual (nodeos/agent/legs.py). When the
daemon stops, `nodeos-fence` fences every primary: a node whose daemon is gone is called down
as a dead one.

A node whose data plane is down (`healthy()` says why: nodeos/node/dpwatch.py) asks for no
renewal: its lease runs out and the leader fails its primaries over, as for a dead node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nodeos.agent.legs import Sent, counted_in_sync
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import NodeosError
from nodeos.storage.failover import LeaseTiming
from nodeos.storage.failover_map import in_sync_of

LOG = logging.getLogger("nodeosd.lease")
CHECK_S = 0.1

# (fenced?, the volumes kept unfenced although fenced) -> the volumes whose export it changed
Fence = Callable[[bool, frozenset[str]], Awaitable[list[str]]]


def sole_primaries(
    st: dict[str, Any], me: int, held: dict[str, Any] | None, sent: list[Sent]
) -> frozenset[str]:
    """The uuids of the ready replicated volumes this node is primary of, in map `st`, whose
    only in-sync replica is this one and stays so whatever this node already said (`held`: its
    report the map holds; `sent`: its reports that may still land). Fencing them protects
    nothing: the leader has nobody to promote (the module's docstring says why)."""
    out = set()
    for uuid, vol in st["volumes"].items():
        if int(vol["primary"]) != me or int(vol.get("replicas") or 1) <= 1 or vol["state"] != "ready":
            continue
        if set(in_sync_of(vol)) == {me} and not counted_in_sync(vol, me, held, sent):
            out.add(str(uuid))
    return frozenset(out)


def reportable(replicas: dict[str, Any], volumes: dict[str, Any], standing: bool) -> dict[str, Any]:
    """A report's replicas as this node may send them: in standing (a good lease, called up, map
    caught up) as they are; out of it, a primary's `members` call no leg in sync that the map
    does not count in sync already (`syncing` instead), so that a node serving its sole
    primaries without a lease never gives the leader somebody to promote."""
    if standing:
        return replicas
    out = {}
    for uuid, rep in replicas.items():
        members = rep.get("members") if isinstance(rep, dict) else None
        if not isinstance(members, dict):
            out[uuid] = rep
            continue
        vol = volumes.get(uuid)
        counted = {int(n) for n in in_sync_of(vol)} if vol is not None else set()
        fixed = {n: "syncing" if s == "in-sync" and int(n) not in counted else s for n, s in members.items()}
        out[uuid] = {**rep, "members": fixed}
    return out


class LeaseKeeper:
    def __init__(
        self,
        cluster: Any,
        fence: Fence,
        timing: LeaseTiming,
        unhealthy: Callable[[], str | None] | None = None,
        sent: Callable[[], list[Sent]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.fence = fence
        self.timing = timing
        self.unhealthy = unhealthy  # why this node must not hold a lease now (None: it may)
        self.sent = sent  # the agent's reports that may not have landed yet (nodeos/agent/legs.py)
        self.withheld: str | None = None
        self.granted_at: float | None = None  # send time of the last granted renewal
        self.grant: tuple[str, int] = ("down", 0)  # the last grant's health and leader's applied index
        self.fenced = True
        self.caught_up = False  # this life: a grant came and the map reached its index
        self.kept: frozenset[str] = frozenset()  # primaries left unfenced while fenced (sole_primaries)
        self.renewals = 0
        self.failures = 0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._renew_loop()), asyncio.create_task(self._fence_loop())]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)

    def valid(self, now: float) -> bool:
        return self.granted_at is not None and now - self.granted_at < self.timing.fence_after_s

    def fence_wanted(self, now: float, applied: int) -> bool:
        """Fenced without a valid lease or when the last grant called the node down; a fence
        lifts only once the node's map (`applied`) reached the leader's at the grant."""
        if not self.valid(now) or self.grant[0] != "up":
            return True
        return self.fenced and applied < self.grant[1]

    def standing(self, now: float, applied: int) -> bool:
        """In good standing: a valid lease, called up, the map caught up (what may promote a leg
        in a report: `reportable`)."""
        return not self.fence_wanted(now, applied)

    def kept_open(self, now: float, st: dict[str, Any], me: int, sent: list[Sent]) -> frozenset[str]:
        """The volumes a fence leaves unfenced now (`sole_primaries`): none while the node holds
        its lease (nothing is fenced), nor before this life caught up with a leader's map (the
        map read back at start may be older than what the node said before it stopped)."""
        applied = int(st["applied_index"])
        if self.granted_at is not None and applied >= self.grant[1]:
            self.caught_up = True
        if not self.caught_up or not self.fence_wanted(now, applied):
            return frozenset()
        return sole_primaries(st, me, st["reports"].get(me), sent)

    def _applied(self) -> int:
        d = getattr(self.cluster, "driver", None)
        return int(d.map.state["applied_index"]) if d is not None else 0

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "lease_s": self.timing.lease_s,
            "valid": self.valid(now),
            "age_s": None if self.granted_at is None else round(now - self.granted_at, 3),
            "fenced": self.fenced,
            "renewals": self.renewals,
            "failures": self.failures,
            "withheld": self.withheld,
            "kept_open": sorted(self.kept),  # fenced, but the only in-sync replica of these: served
        }

    async def renew_once(self) -> bool:
        d = getattr(self.cluster, "driver", None)
        if d is None or d.id not in d.map.nodes:
            return False
        why = self.unhealthy() if self.unhealthy is not None else None
        if why != self.withheld:
            if why:
                LOG.error("lease not renewed: %s", why)
            else:
                LOG.warning("lease renewals resume")
            self.withheld = why
        if why:
            return False
        sent = time.monotonic()
        try:
            out = await self.cluster.at_leader(
                "lease", {"node_id": d.id}, max(self.timing.renew_s * 2, 1.0), idempotent=True
            )
        except NodeosError as err:
            self.failures += 1
            if self.failures in (1, 10) or self.failures % 100 == 0:
                LOG.warning("lease not renewed (%s); %d failure(s) in a row", err.message, self.failures)
            return False
        lease_s = out.get("lease_s") if isinstance(out, dict) else None
        if isinstance(lease_s, (int, float)) and lease_s != self.timing.lease_s:
            self.timing = LeaseTiming(float(lease_s))  # the leader's length rules
        if self.failures:
            LOG.info("lease renewed again after %d failure(s)", self.failures)
        self.failures = 0
        self.renewals += 1
        self.granted_at = max(self.granted_at or sent, sent)
        if isinstance(out, dict):
            self.grant = (str(out.get("health") or "up"), int(out.get("index") or 0))
        return True

    async def _renew_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.renew_once()
            except Exception:
                LOG.exception("lease renewal failed")
            await asyncio.sleep(max(0.05, self.timing.renew_s - (time.monotonic() - started)))

    def _kept_now(self, now: float) -> frozenset[str]:
        d = getattr(self.cluster, "driver", None)
        if d is None:
            return frozenset()
        sent = list(self.sent()) if self.sent is not None else []
        return self.kept_open(now, d.map.state, int(d.id), sent)

    async def _fence_loop(self) -> None:
        while True:
            now = time.monotonic()
            want = self.fence_wanted(now, self._applied())
            keep = self._kept_now(now) if want else frozenset()
            if keep != self.kept and (keep or want):
                LOG.warning(
                    "fence left off for %s: the only in-sync replica, nobody to fail over to",
                    sorted(keep) or "no volume any more",
                )
            self.kept = keep
            try:
                changed = await self.fence(want, keep)
            except Exception:
                LOG.exception("fence %s failed", "on" if want else "off")
                changed = []
            if want != self.fenced:
                if want:
                    age = (
                        "never granted"
                        if self.granted_at is None
                        else (f"last granted {time.monotonic() - self.granted_at:.1f} s ago")
                    )
                    LOG.error("lease lost (%s): fenced, primaries refuse I/O: %s", age, changed or "none")
                else:
                    LOG.warning("lease valid: fence lifted for %s", changed or "no primary")
                self.fenced = want
            await asyncio.sleep(CHECK_S)
