"""The daemon's stop cannot hang: a stuck service is logged and left, a stuck process exits with stacks."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

from nodeos.daemon.stopguard import bounded_stop, cancel_and_wait

RELEASED = asyncio.Event()


async def _stuck_for_good() -> None:
    # A stop that swallows its cancellation (as asyncio.wait_for may on Python 3.11) and waits on,
    # until the test lets it go (else asyncio.run's own clean-up would wait for it for ever).
    while not RELEASED.is_set():
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            continue


def run_bounded(main: Any, limit_s: float = 15.0) -> Any:
    """asyncio.run(main()) on a thread of its own, so that a stop that hangs fails the test."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(main())), daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"still waiting after {limit_s} s: the stop is not bounded"
    return out[0]


async def _quick() -> None:
    await asyncio.sleep(0)


async def _broken() -> None:
    raise RuntimeError("disk gone")


def test_a_stuck_stop_is_left_after_its_bound_and_logged_with_where_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> tuple[bool, float]:
        t0 = time.monotonic()
        ok = await bounded_stop("the cluster service", _stuck_for_good(), timeout_s=0.3)
        took = time.monotonic() - t0
        RELEASED.set()
        return ok, took

    with caplog.at_level(logging.ERROR, logger="nodeosd"):
        ok, took = run_bounded(main)
    assert ok is False and took < 5
    text = caplog.text
    assert "stopping the cluster service did not finish within 0.3 s" in text
    assert "_stuck_for_good" in text, text  # where it waits is in the log


def test_a_stop_that_finishes_or_fails_is_reported_as_such(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[bool, bool]:
        return await bounded_stop("quick", _quick()), await bounded_stop("broken", _broken())

    with caplog.at_level(logging.ERROR, logger="nodeosd"):
        ok, failed = asyncio.run(main())
    assert ok is True and failed is False
    assert "stopping broken failed" in caplog.text and "disk gone" in caplog.text


def test_a_process_whose_stop_hangs_exits_at_the_deadline_with_every_threads_stack() -> None:
    # A worker thread that never ends holds the interpreter's exit (as a stuck to_thread call
    # holds asyncio.run's clean-up): the deadline must end the process and say where it hung.
    code = textwrap.dedent(
        """
        import threading, time
        from nodeos.daemon.stopguard import StopDeadline

        def hang_in_worker():
            while True:
                time.sleep(1)

        threading.Thread(target=hang_in_worker, name="stuck-worker").start()
        StopDeadline(0.5).arm()
        """
    )
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert time.monotonic() - t0 < 20
    assert "the stop did not finish within 0.5 s" in r.stderr
    assert "hang_in_worker" in r.stderr, r.stderr  # the stuck thread's stack is in the log


def test_a_loop_that_swallowed_its_cancellation_is_cancelled_again_until_it_ends() -> None:
    # Python 3.11's wait_for may hand back a result instead of the CancelledError when both
    # arrive at once: the loop then goes on to its next await as if nothing happened.
    started = asyncio.Event()

    async def loop_that_swallows_once() -> None:
        swallowed = False
        started.set()
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed = True

    async def main() -> bool:
        t = asyncio.create_task(loop_that_swallows_once())
        await started.wait()
        await cancel_and_wait(t, None, every_s=0.05)
        return t.cancelled()

    assert run_bounded(main, limit_s=10) is True
