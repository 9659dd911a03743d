"""A failed Raft member is noticed, taken down and restarted from its on-disk state.

Part of ClusterService (nodeos/cluster/service.py): the disk filling up (`mdb_txn_commit`
ENOSPC) or a corrupt record stops the member's Ready loop; the service then reports
`role: failed` with the reason, refuses requests with `not_leader`, closes its peer listener
and restarts the member after 1 s, 2, 4 ... 30 s. A restarted member counts as back once it
knows a leader. The daemon shows the failure in `nodeos status` and withdraws the watchdog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from nodeos.cluster.raft import NONE
from nodeos.store.lmdb_store import storage_error

log = logging.getLogger("nodeosd.cluster")
RETRY_MIN_S, RETRY_MAX_S = 1.0, 30.0  # restart delays of a failed Raft member


class MemberSupervisor:
    """Mixin of ClusterService: the attributes below are the service's."""

    identity: dict[str, Any] | None
    driver: Any
    failure: str | None
    _lock: asyncio.Lock
    _retry_delay: float
    _retry_at: float

    if TYPE_CHECKING:  # provided by ClusterService

        async def _start_member(self, extra_peers: dict[int, str], transport: Any = None) -> None: ...

        async def _stop_member(self) -> None: ...

        def stall_failure(self) -> str | None: ...

    def failed(self) -> str | None:
        """Why this node cannot take part in its cluster right now (None: it can)."""
        return self.failure or self.stall_failure()

    def _saved_peers(self) -> dict[int, str]:
        assert self.identity is not None
        return {int(k): str(v) for k, v in (self.identity.get("peers") or {}).items()}

    async def _member_failed(self, exc: BaseException | str) -> None:
        if isinstance(exc, str):
            why = exc
        else:
            err = storage_error(exc)
            why = f"{err.code}: {err.message}" if err else f"{type(exc).__name__}: {exc}"
        # Failing again while recovering doubles the delay before the next attempt.
        self._retry_delay = (
            min(self._retry_delay * 2, RETRY_MAX_S) if self.failure is not None else RETRY_MIN_S
        )
        self._retry_at = time.monotonic() + self._retry_delay
        self.failure = why
        log.error("cluster member failed, retrying in %.0f s: %s", self._retry_delay, why)
        await self._stop_member()

    async def _supervise(self) -> None:
        """Notice a dead Raft loop, take the member down, restart it from disk with backoff.

        A restarted member counts as back only once it knows a leader: a lone node must win an
        election first, which writes to the disk that failed.
        """
        while True:
            await asyncio.sleep(0.2)  # polling flags: cheap, and unaffected by init/join/leave
            d = self.driver
            if d is not None and d._tasks and not d.running:
                async with self._lock:
                    if self.driver is d:
                        await self._member_failed(d.failure or "the raft loop stopped")
                continue
            if self.failure is None or self.identity is None:
                continue
            if d is not None:
                if d.leader != NONE:
                    log.info("cluster member is back (leader %d) after: %s", d.leader, self.failure)
                    self.failure = None
                    self._retry_delay = 0.0
                continue
            if time.monotonic() < self._retry_at:
                continue
            async with self._lock:
                if self.failure is None or self.identity is None or self.driver is not None:
                    continue
                try:
                    await self._start_member(extra_peers=self._saved_peers())
                except Exception as exc:
                    await self._member_failed(exc)
                else:
                    log.info("cluster member restarted from disk; waiting to hear from a leader")
