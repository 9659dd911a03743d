"""A background watch that runs `tick()` every `every_s` until stopped (the data plane watch,
the leg watch): one failed tick is logged and the next one comes on time."""

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
            await asyncio.sleep(max(0.05, self.every_s - (time.monotonic() - started)))
