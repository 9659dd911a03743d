"""Who waits on the Raft driver: a proposer until its entry is committed and applied here (the
map's result, or the membership after a conf change), a linearizable reader until the leader
confirmed its ReadIndex and the map applied up to it. The driver (driver.py) settles them; on a
lost leadership or a stop every one still waiting fails."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from nodeos.cluster.errors import NotLeader


class Waiters:
    def __init__(self) -> None:
        self.proposals: dict[bytes, asyncio.Future[Any]] = {}
        self.reads: dict[bytes, asyncio.Future[int]] = {}
        self.read_ready: list[tuple[int, asyncio.Future[int]]] = []

    def add_proposal(self, rid: bytes) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.proposals[rid] = fut
        return fut

    def add_read(self, ctx: bytes) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.reads[ctx] = fut
        return fut

    def applied(self, rid: Any, result: Any) -> None:
        """The entry proposed as `rid` is applied: its proposer, if waiting here, gets `result`."""
        fut = self.proposals.get(rid) if isinstance(rid, bytes) else None
        if fut is not None and not fut.done():
            fut.set_result(result)

    def read_confirmed(self, ctx: bytes, index: int) -> None:
        """The leader confirmed the read `ctx` at `index`: served once the map applied that far."""
        fut = self.reads.get(ctx)
        if fut is not None:
            self.read_ready.append((index, fut))

    def serve_reads(self, applied_index: int) -> None:
        keep = []
        for index, fut in self.read_ready:
            if fut.done():
                continue
            if applied_index >= index:
                fut.set_result(index)
            else:
                keep.append((index, fut))
        self.read_ready = keep

    def fail_all(self, err: Exception) -> None:
        for fut in list(self.proposals.values()):
            if not fut.done():
                fut.set_exception(err)
        for fut in list(self.reads.values()):
            if not fut.done():
                fut.set_exception(NotLeader(str(err)))
        self.read_ready.clear()


async def settled(
    fut: asyncio.Future[Any],
    timeout: float,
    pending: dict[bytes, Any],
    key: bytes,
    late: Callable[[], Exception],
) -> Any:
    """The future's result within `timeout`, else `late()` raised (made only then: every proposal
    passes here); either way it is no longer pending."""
    try:
        async with asyncio.timeout(timeout):
            return await fut
    except TimeoutError:
        raise late() from None
    finally:
        pending.pop(key, None)


class ReadRounds:
    """Linearizable read barriers that share ReadIndex rounds: the readers that arrive while a
    round runs share the next one. Every member's lease renewal is a read barrier at the leader
    (nodeos/control/failover_loop.py) and a round is a heartbeat to every member and back, so one
    round per barrier cost the leader members x renewals messages a second (30 members: a leader
    too busy to keep its leadership on a loaded host); shared, it is at most one round per round
    trip, or per `spacing_s` while a slow round is still out: the next one then starts beside it,
    so one slow or lost round does not fail every renewal behind it (on a loaded lab a round of
    1-2 s made later readers wait for it and then their own, past their 2 s, and primaries'
    leases ran out). Safe as each round's index is asked for after every one of its readers
    began (Raft dissertation 6.4: any read index taken after the read started)."""

    def __init__(self, waiters: Waiters, issue: Callable[[bytes], None], spacing_s: float = 0.25) -> None:
        self.waiters = waiters
        self.issue = issue  # asks Raft for a read index with this context (ProposalDropped: not leader)
        self.spacing_s = spacing_s
        self.queue: list[asyncio.Future[None]] = []
        self.inflight = 0
        self.rounds = 0
        self._last_start = float("-inf")
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def barrier(self, timeout: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.append(fut)
        self._kick()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(fut)
        except TimeoutError:
            raise NotLeader(f"leadership not confirmed within {timeout} s") from None

    def _kick(self) -> None:
        """Start a round for the waiting readers now, or once `spacing_s` after the last start."""
        if not self.queue:
            return
        loop = asyncio.get_running_loop()
        wait = self._last_start + self.spacing_s - loop.time()
        if self.inflight and wait > 0:
            if self._timer is None:
                self._timer = loop.call_later(wait, self._fire)
            return
        if self._timer is not None:  # the round out ended first: no need to wait for the spacing
            self._timer.cancel()
            self._timer = None
        self._last_start = loop.time()
        self.inflight += 1
        task = loop.create_task(self._run())
        self._tasks.add(task)  # a reference until done (the loop keeps only a weak one)
        task.add_done_callback(self._tasks.discard)

    def _fire(self) -> None:
        self._timer = None
        self._kick()

    async def _run(self) -> None:
        # The readers come along when the round is asked for (every one that began by then),
        # not when it was decided: those arriving in between share it too.
        batch, self.queue = self.queue, []
        try:
            err = await self._round() if batch else None
        finally:
            self.inflight -= 1
        for fut in batch:
            if fut.done():
                continue
            if err is None:
                fut.set_result(None)
            else:
                fut.set_exception(err)
                # A reader that gave up without cancelling its future (a bounded wait) never
                # reads this: marked retrieved, so the log gets no "never retrieved" traceback.
                fut.add_done_callback(_retrieved)
        self._kick()

    async def _round(self) -> Exception | None:
        ctx = os.urandom(12)
        rfut = self.waiters.add_read(ctx)
        self.rounds += 1
        try:
            self.issue(ctx)
            async with asyncio.timeout(5.0):  # each reader's own timeout is shorter or equal
                await rfut
            return None
        except TimeoutError:
            return NotLeader("leadership not confirmed within 5 s")
        except Exception as exc:  # ProposalDropped, or NotLeader from fail_all
            return exc if isinstance(exc, NotLeader) else NotLeader(f"read barrier not accepted: {exc}")
        finally:
            self.waiters.reads.pop(ctx, None)


def _retrieved(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
