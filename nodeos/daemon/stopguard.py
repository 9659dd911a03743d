"""A stop that cannot hang.

Each service's stop is bounded: one that does not finish in time is logged with where it and
every other pending task are stuck, and the stop goes on with the next service. The whole stop,
including asyncio's own clean-up of tasks and worker threads after the daemon returns, has a
deadline below the unit's TimeoutStopSec: past it the stacks of every thread go to the log and
the process exits. Everything acknowledged is already durable (LMDB commits, intents), so an
exit there loses nothing; waiting longer would only earn a SIGKILL with no trace of the cause.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import logging
import os
import sys
import threading
from collections.abc import Awaitable
from typing import Any

from nodeos.errors import EXIT_FAILED

LOG = logging.getLogger("nodeosd")

SERVICE_STOP_S = 10.0
# systemd SIGKILLs 30 s after SIGTERM (TimeoutStopSec=30): the stacks must be in the log before.
STOP_DEADLINE_S = 25.0


def pending_tasks(exclude: asyncio.Task[Any] | None = None) -> str:
    """Every pending task of the running loop and where it waits, for the log."""
    buf = io.StringIO()
    for t in asyncio.all_tasks():
        if t is exclude or t is asyncio.current_task():
            continue
        buf.write(f"task {t.get_name()} ({t.get_coro()!r}):\n")
        t.print_stack(limit=8, file=buf)
    return buf.getvalue()


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None, every_s: float = 0.5) -> None:
    """Cancel the tasks and wait until each has ended, cancelling again while one runs on.

    Python 3.11's asyncio.wait_for returns the inner result when a cancellation meets a result
    arriving at the same moment, so a loop goes on as if never cancelled: a single cancel and
    an await hung nodeosd's stop in CI (the lease keeper's renew loop, after a forwarded renew
    returned just as it was cancelled). A repeated cancel lands at the loop's next await."""
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=every_s)
    for t in tasks:
        if t is not None and not t.cancelled() and t.exception() is not None:
            LOG.warning("task %s had ended with: %r", t.get_name(), t.exception())


async def bounded_stop(name: str, aw: Awaitable[None], timeout_s: float = SERVICE_STOP_S) -> bool:
    """Await a service's stop for at most timeout_s; True when it finished (a failure is logged)."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        stuck = io.StringIO()
        task.print_stack(file=stuck)
        LOG.error(
            "stopping %s did not finish within %g s; going on without it. Its stop waits at:\n%s"
            "Other pending tasks:\n%s",
            name,
            timeout_s,
            stuck.getvalue(),
            pending_tasks(exclude=task),
        )
        return False
    if task.cancelled():
        LOG.error("stopping %s was cancelled", name)
        return False
    exc = task.exception()
    if exc is not None:
        LOG.error("stopping %s failed", name, exc_info=exc)
        return False
    return True


class StopDeadline:
    """Armed when the stop begins and never disarmed in the daemon: the interpreter's exit waits
    for worker threads too."""

    def __init__(self, seconds: float = STOP_DEADLINE_S) -> None:
        self.seconds = seconds
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.seconds, self._expire)
            self._timer.daemon = True
            self._timer.name = "stop-deadline"
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        # Not through logging: its handlers' locks may be held by the very thread that hangs.
        sys.stderr.write(
            f"nodeosd: the stop did not finish within {self.seconds:g} s; "
            "the stack of every thread follows, then the process exits\n"
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(EXIT_FAILED)
