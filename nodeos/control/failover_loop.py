"""The leader's side of leases and failover (the shell around nodeos/storage/failover.py).

- `lease` (a leader handler, reached from every node through the cluster service): a read
  barrier proves this node still leads, then the renewal is recorded and the lease length
  returned.
- A loop that, while this node leads, feeds the pure controller the members its Raft saw
  active (the progress tracker, and the leader itself: a node whose renewals are late but
  whose Raft member answers is suspect before it is down), asks it what to do and proposes
  its commands one at a time, so every decision is taken on the map as applied; a node called
  down is decided on again at once (its failovers), not a tick later.
- A new leader asks the voters when they last acknowledged an older leader (`lease.contact`,
  nodeos/cluster/leader_contact.py) and counts every lease from that moment once a majority
  answered, not from its own election (issue 29: a lost leader that was a primary cost an
  election timeout more than its lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from nodeos.cluster.errors import NotLeader
from nodeos.cluster.leader_contact import lease_floor
from nodeos.cluster.leader_ops import int_param
from nodeos.cluster.map import encode_current
from nodeos.cluster.raft import StateRole
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import NodeosError, NotFound
from nodeos.storage import failover, pool_index
from nodeos.storage.lookup import health_of
from nodeos.storage.replace import ReplacePolicy

LOG = logging.getLogger("nodeosd.failover")
TICK_S = 0.1
FOLLOWER_WAIT_S = 1.0  # bounded: a missed leader change costs at most this
WOKEN_GAP_S = 0.03  # between decisions at least, however often the map changes
EAGER_S = 5.0  # after a decision, map changes wake the loop this long (a hand-over's confirmation)
PROPOSE_TIMEOUT_S = 5.0
FLOOR_ASK_S = 0.5  # one voter's answer; a dead one is asked again while no majority answered
REDECIDE = 3  # decisions taken again at once after a health change (down, then its failovers)


class FailoverLoop:
    def __init__(
        self, cluster: Any, timing: failover.LeaseTiming, policy: ReplacePolicy | None = None
    ) -> None:
        self.cluster = cluster
        self.timing = timing
        self.policy = policy or ReplacePolicy()
        self._refused: set[tuple[str, int]] = set()  # re-placements refused, logged once each
        self.leases: failover.Leases | None = None
        self._term: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._unavailable: list[str] = []
        self._floor: asyncio.Task[None] | None = None
        self._eager_until = 0.0

    def start(self) -> None:
        self.cluster.leader_handlers["lease"] = self.lease
        self.cluster.peer_handlers["lease."] = self.contact
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self.cluster.leader_handlers.pop("lease", None)
        self.cluster.peer_handlers.pop("lease.", None)
        await cancel_and_wait(self._task, self._floor)

    def _leading(self, d: Any) -> failover.Leases | None:
        """The lease table of this leadership (a new term starts a fresh one)."""
        if d is None or d.role is not StateRole.LEADER:
            self.leases, self._term = None, None
            return None
        if self.leases is None or self._term != d.term:
            self.leases, self._term = failover.Leases(leader_since=time.monotonic()), d.term
            LOG.info("leading term %d: every lease counts from now until the voters answer", d.term)
            if self._floor is not None:
                self._floor.cancel()
            self._floor = asyncio.create_task(self._ask_floor(d, self.leases, d.term))
        return self.leases

    async def contact(self, frm: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A new leader asks when this member last acknowledged a leader of an older term."""
        d = getattr(self.cluster, "driver", None)
        term = int_param(params, "term", required=True)
        if method != "lease.contact" or d is None:
            raise NotFound(f"no such method {method!r}", field="method")
        return {"ago_s": d.contact_ago(term)}

    async def _ask_one(self, d: Any, nid: int, term: int) -> tuple[int, float | None]:
        """Voter `nid`'s last moment with an older leader, on this clock (None: no answer yet)."""
        if nid == d.id:
            ago = d.contact_ago(term)
        elif getattr(self.cluster, "transport", None) is None:
            return nid, None
        else:
            try:
                out = await self.cluster.transport.request(nid, "lease.contact", {"term": term}, FLOOR_ASK_S)
            except (NodeosError, OSError, TimeoutError):
                return nid, None
            ago = out.get("ago_s") if isinstance(out, dict) else None
        # Counted back from the answer's arrival: the moment it names is no later than that.
        return nid, None if not isinstance(ago, (int, float)) else time.monotonic() - float(ago)

    async def _ask_floor(self, d: Any, leases: failover.Leases, term: int) -> None:
        voters = tuple(d.conf_state.voters)
        answers: dict[int, float] = {}
        while self.leases is leases:
            asks = [asyncio.ensure_future(self._ask_one(d, v, term)) for v in voters if v not in answers]
            try:
                for fut in asyncio.as_completed(asks):
                    nid, t = await fut
                    if t is None:
                        continue
                    answers[nid] = t
                    floor = lease_floor(answers, voters)
                    if floor is not None and self.leases is leases:
                        leases.floor = floor
                        LOG.info(
                            "leading term %d: leases count from %.2f s before this leadership (voters %s)",
                            term, leases.leader_since - leases.start(), sorted(answers),
                        )  # fmt: skip
                        return
            finally:
                for f in asks:
                    f.cancel()
            await asyncio.sleep(TICK_S)

    async def lease(self, d: Any, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        nid = int_param(params, "node_id", required=True)
        if nid not in d.map.nodes:
            raise NotFound(f"node {nid} is not a member", field="node_id")
        await d.read_barrier(min(timeout, 2.0))
        leases = self._leading(d)
        if leases is None:
            raise NotLeader(f"node {d.id} is no longer the leader")
        leases.renewed(int(nid), time.monotonic(), self.timing)
        # The node lifts its fence only once its own map reached this index (nodeos/agent/lease.py).
        st = d.map.state
        return {
            "lease_s": self.timing.lease_s,
            "health": health_of(st, int(nid)),
            "index": st["applied_index"],
        }

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(WOKEN_GAP_S)
            d = getattr(self.cluster, "driver", None)
            if d is not None and d.role is StateRole.LEADER and time.monotonic() < self._eager_until:
                # While something moves, a map change (a hand-over confirmed) is decided on at
                # once; an idle cluster's reports keep to the tick (decide reads the whole map).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(d.map_changed.wait(), TICK_S - WOKEN_GAP_S)
            elif d is not None and d.role is not StateRole.LEADER:
                # Only a leader decides: a follower waits to become one (or a second), not a tick.
                self._leading(d)  # a leadership's lease table goes with it
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(d.leader_changed.wait(), FOLLOWER_WAIT_S)
                continue
            else:
                await asyncio.sleep(TICK_S - WOKEN_GAP_S)
            try:
                await self.tick()
            except Exception:
                LOG.exception("failover controller tick failed")

    async def tick(self) -> None:
        for _ in range(REDECIDE):
            if not await self._decide_once():
                return

    async def _decide_once(self) -> bool:
        """One round of decisions, proposed; True when a node's health changed (decide again)."""
        d = getattr(self.cluster, "driver", None)
        leases = self._leading(d)
        if leases is None:
            return False
        st = d.map.state
        now = time.monotonic()
        leases.heard(failover.in_contact_now(d.node.status().progress, d.id), now)
        with pool_index.deciding_on(d.map):
            cmds = failover.decide(st, leases, now, self.timing, self.policy)
        for key in sorted(set(leases.refused) - self._refused):
            LOG.warning("no place to re-place a replica: %s", leases.refused[key])
        self._refused = set(leases.refused)  # one that found room and is refused again is logged again
        if cmds:
            self._eager_until = now + EAGER_S
        for cmd, args in cmds:
            if cmd == "record_event":
                args = {**args, "at": time.time()}  # the pure core reads no wall clock
            LOG.warning("failover controller: %s %s", cmd, args)
            try:
                await d.propose(encode_current(st, cmd, args), PROPOSE_TIMEOUT_S)
            except NodeosError as err:
                LOG.warning("failover controller: %s not committed: %s", cmd, err.message)
                return False
        gone = failover.unavailable(d.map.state)
        if gone != self._unavailable:
            if gone:
                LOG.error("no in-sync replica is up to take over volume(s) %s; waiting", ", ".join(gone))
            self._unavailable = gone
        return any(cmd == "node_health" for cmd, _ in cmds)
