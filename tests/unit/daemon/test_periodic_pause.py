"""A periodic watch whose ticks overrun their period takes at most half of the time."""

from __future__ import annotations

import asyncio
import time

from nodeos.daemon.periodic import Periodic, pause_after


def test_a_tick_within_its_period_is_followed_by_the_rest_of_the_period() -> None:
    assert pause_after(0.05, 0.2) == 0.2 - 0.05
    assert pause_after(0.19, 0.2) == 0.05  # never a busy loop


def test_a_tick_that_overran_its_period_is_followed_by_a_pause_as_long() -> None:
    assert pause_after(3.0, 0.2) == 3.0
    assert pause_after(0.2, 0.2) == 0.2


class _Slow(Periodic):
    every_s = 0.01

    def __init__(self) -> None:
        self.busy = 0.0

    async def tick(self) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.2:  # a tick 20 times its period, on the CPU
            pass
        self.busy += time.monotonic() - t0


def test_a_slow_watch_leaves_the_loop_at_least_half_of_the_time() -> None:
    async def run() -> float:
        w = _Slow()
        w.start()
        t0 = time.monotonic()
        await asyncio.sleep(1.5)
        await w.stop()
        return w.busy / (time.monotonic() - t0)

    share = asyncio.run(run())
    assert share <= 0.6, f"the watch held the loop {share:.0%} of the time"
