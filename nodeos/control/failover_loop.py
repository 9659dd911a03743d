"""The leader's side of leases and failover (the shell around nodeos/storage/failover.py).

- `lease` (a leader handler, reached from every node through the cluster service): a read
  barrier proves this node still leads, then the renewal is recorded and the lease length
  returned.
- A loop that, while this node leads, feeds the pure controller the members its Raft saw
  active (the progress tracker, and the leader itself: a node whose renewals are late but
  whose Raft member answers is suspect before it is down), asks it what to do and proposes
  its commands one at a time, so every decision is taken on the map as applied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from nodeos.cluster.errors import NotLeader
from nodeos.cluster.leader_ops import int_param
from nodeos.cluster.map import encode_command
from nodeos.cluster.raft import StateRole
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import NodeosError, NotFound
from nodeos.storage import failover, pool_index
from nodeos.storage.lookup import health_of
from nodeos.storage.replace import ReplacePolicy

LOG = logging.getLogger("nodeosd.failover")
TICK_S = 0.2
PROPOSE_TIMEOUT_S = 5.0


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

    def start(self) -> None:
        self.cluster.leader_handlers["lease"] = self.lease
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self.cluster.leader_handlers.pop("lease", None)
        await cancel_and_wait(self._task)

    def _leading(self, d: Any) -> failover.Leases | None:
        """The lease table of this leadership (a new term starts a fresh one)."""
        if d is None or d.role is not StateRole.LEADER:
            self.leases, self._term = None, None
            return None
        if self.leases is None or self._term != d.term:
            self.leases, self._term = failover.Leases(leader_since=time.monotonic()), d.term
            LOG.info("leading term %d: every lease counts from now", d.term)
        return self.leases

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
            await asyncio.sleep(TICK_S)
            try:
                await self.tick()
            except Exception:
                LOG.exception("failover controller tick failed")

    async def tick(self) -> None:
        d = getattr(self.cluster, "driver", None)
        leases = self._leading(d)
        if leases is None:
            return
        st = d.map.state
        now = time.monotonic()
        leases.heard(failover.in_contact_now(d.node.status().progress, d.id), now)
        with pool_index.deciding_on(d.map):
            cmds = failover.decide(st, leases, now, self.timing, self.policy)
        for key in sorted(set(leases.refused) - self._refused):
            LOG.warning("no place to re-place a replica: %s", leases.refused[key])
        self._refused = set(leases.refused)  # one that found room and is refused again is logged again
        for cmd, args in cmds:
            if cmd == "record_event":
                args = {**args, "at": time.time()}  # the pure core reads no wall clock
            LOG.warning("failover controller: %s %s", cmd, args)
            try:
                await d.propose(encode_command(cmd, args), PROPOSE_TIMEOUT_S)
            except NodeosError as err:
                LOG.warning("failover controller: %s not committed: %s", cmd, err.message)
                return
        gone = failover.unavailable(d.map.state)
        if gone != self._unavailable:
            if gone:
                LOG.error("no in-sync replica is up to take over volume(s) %s; waiting", ", ".join(gone))
            self._unavailable = gone
