"""A background watch that runs `tick()` every `every_s` until stopped (the data plane watch,
the leg watch): one failed tick is logged and the next one comes on time.

A tick that takes longer than its period (a node short of CPU: a loaded host, TCG) is followed
by a pause as long as the tick, not by the next tick at once: a watch then takes at most half
of the time instead of all of it, and leaves the CPU (and the GIL) to the lease renewal, the
Raft loop and the agent, whose delay would fence the node and turn a slow node into a failover
(seen in the lab: a leg watch of 0.2 s whose ticks took 2-13 s, leases lost meanwhile)."""

from __future__ import annotations

import asyncio
import logging
import time

from nodeos.daemon.stopguard import cancel_and_wait


class Periodic:
    every_s: float = 1.0
    what: str = "periodic task"  # for the log line of a failed tick
    slow_s: float | None = None  # a tick this long is logged
    log: logging.Logger = logging.getLogger("nodeosd")

    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def tick(self) -> None:
        raise NotImplementedError

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.tick()
            except Exception:
                self.log.exception("%s failed", self.what)
            took = time.monotonic() - started
            if self.slow_s is not None and took > self.slow_s:
                self.log.info("%s took %.1f s", self.what, took)
            await asyncio.sleep(pause_after(took, self.every_s))


def pause_after(took: float, every_s: float) -> float:
    """Pure: the pause after a tick that took `took`: the rest of the period, and never less
    than the tick itself once it overran the period (at most half of the time busy)."""
    if took >= every_s:
        return took
    return max(0.05, every_s - took)
