"""The node's side of its lease: renew at the leader, fence itself before the lease runs out.

Every `renew_s` the node asks the leader to renew its lease (nodeos/control/failover_loop.py).
A granted renewal makes the lease valid until the moment the request was *sent* plus
`lease_s` (the leader counts from when it arrived, later, so the node's view ends first).
Past `fence_after_s` without a granted renewal the node fences itself: every primary's front
end goes ANA inaccessible, so the target refuses host I/O there, before the leader may call
the node down and promote another replica (nodeos/cluster/failover.py). A renewal granted
again lifts the fence, but only when the grant says the node is up and the node's own map has
applied what the leader's had at the grant: a node the leader called down may have had its
volumes failed over (it stays fenced until the leader calls it up), and a node whose map is
behind may still believe it is the primary of a volume that moved (found by the simulator's
failover workload: two writable primaries). A grant saying down fences at once.

A node starts fenced: after a restart it may have been replaced as primary while it was gone.

A node whose data plane is down (`healthy()` says why: nodeos/node/dpwatch.py) asks for no
renewal: its lease runs out and the leader fails its primaries over, as for a dead node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nodeos.cluster.failover import LeaseTiming
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import NodeosError

LOG = logging.getLogger("nodeosd.lease")
CHECK_S = 0.1

Fence = Callable[[bool], Awaitable[list[str]]]  # fenced? -> the volumes it changed


class LeaseKeeper:
    def __init__(
        self,
        cluster: Any,
        fence: Fence,
        timing: LeaseTiming,
        unhealthy: Callable[[], str | None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.fence = fence
        self.timing = timing
        self.unhealthy = unhealthy  # why this node must not hold a lease now (None: it may)
        self.withheld: str | None = None
        self.granted_at: float | None = None  # send time of the last granted renewal
        self.grant: tuple[str, int] = ("down", 0)  # the last grant's health and leader's applied index
        self.fenced = True
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

    async def _fence_loop(self) -> None:
        while True:
            want = self.fence_wanted(time.monotonic(), self._applied())
            try:
                changed = await self.fence(want)
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
