"""Who waits on the Raft driver: a proposer until its entry is committed and applied here (the
map's result, or the membership after a conf change), a linearizable reader until the leader
confirmed its ReadIndex and the map applied up to it. The driver (driver.py) settles them; on a
lost leadership or a stop every one still waiting fails."""

from __future__ import annotations

import asyncio
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
