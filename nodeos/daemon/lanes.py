"""The data plane's worker lanes: no call into the fabric can wedge the node (issue 25).

Data plane calls block (subprocesses, sysfs and configfs writes, SPDK's socket), so they run in
worker threads. Until issue 25 every one of them ran on one worker: a call stuck in the kernel
(md waiting on a leg whose path is gone, an `lvs` reading such a leg) stopped every later call
of the node, its agent's reports and so the map. Now:

- Calls go on lanes, one worker thread each, so calls of a lane keep their order: `fabric` for
  what touches remote legs, md arrays and views (the initiator, mirrors), `local` for the rest
  (LVM, nvmet configfs, SPDK's RPC socket, which has a lock of its own). A leg that blocks holds
  the fabric lane, never LVM or the exports.
- Every call has a deadline (`deadline_for`). A call past it is named (method, lane, since when)
  in `stuck()`, which the node reports (`nodeos status`, an event, a metric); the journal gets its
  Python stack and the kernel stacks of this process's blocked tasks. The caller gets
  `OperationFailed` at once, and the lane a fresh worker: the stuck thread is left to return by
  itself (no thread can be killed), then forgotten with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeos.errors import OperationFailed

LOG = logging.getLogger("nodeosd.dataplane")
LANES = ("local", "fabric")
# Data plane methods that touch remote legs, md arrays or the views over them.
FABRIC_METHODS = frozenset(
    {
        "attach_remote", "detach_remote", "list_remotes", "drop_mirror_leg", "cut_mirror_legs",
        "assemble_mirror", "stop_mirror", "grow_mirror", "mirror_status", "list_mirrors",
        "rescan_remote", "prepare_mirror_freeze", "freeze_mirror_writes", "thaw_mirror_writes",
        "read_and_thaw_mirror", "mirror_writes_frozen", "ensure_view", "remove_view", "block_view",
        "wipe_mirror_member", "set_rebuild_limit",
    }
)  # fmt: skip
DEFAULT_DEADLINE_S = 60.0
# Calls whose own inner bounds are longer (LVM commands 300 s, mdadm 120 s, a connect 60 s): the
# lane's deadline guards what has no bound of its own, so it lies past those.
DEADLINES_S = {
    "create_pool": 330.0,
    "delete_pool": 330.0,
    "create_volumes": 330.0,
    "create_volume": 330.0,
    "resize_volume": 330.0,
    "delete_volume": 330.0,
    "snapshot_volume": 330.0,
    "clone_snapshot": 330.0,
    "attach_remote": 90.0,
    "assemble_mirror": 150.0,
    "grow_mirror": 150.0,
    "stop_mirror": 150.0,
    "rescan_remote": 60.0,
    "reapply_exports": 330.0,  # every export of the node again, after its target restarted
    "choose_dataplane": 120.0,
    # `nodeos status` asks it: a target that hangs must not hold status (nor the lane) for long.
    "describe": 5.0,
}


def lane_of(method: str) -> str:
    return "fabric" if method in FABRIC_METHODS else "local"


def deadline_for(method: str) -> float:
    return DEADLINES_S.get(method, DEFAULT_DEADLINE_S)


@dataclass
class StuckCall:
    method: str
    lane: str
    started: float  # time.time() when the call started
    thread_id: int | None


def blocked_tasks(proc: Path = Path("/proc/self/task")) -> list[str]:
    """The kernel stacks of this process's tasks in uninterruptible sleep (D), as /proc shows
    them (root): where a stuck call waits in the kernel."""
    out = []
    try:
        tasks = sorted(proc.iterdir())
    except OSError:
        return out
    for t in tasks:
        try:
            stat = (t / "stat").read_text()
            state = stat.rsplit(")", 1)[1].split()[0]
            if state != "D":
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            try:
                stack = (t / "stack").read_text().strip()
            except OSError:
                stack = "(not readable)"
            out.append(f"task {t.name} ({name}) D:\n{stack}")
        except (OSError, IndexError, ValueError):
            continue
    return out


class Lanes:
    def __init__(self, deadline_for: Callable[[str], float] = deadline_for) -> None:
        self._deadline_for = deadline_for
        self._pools = {lane: self._pool(lane) for lane in LANES}
        self._stuck: dict[int, StuckCall] = {}  # by id of the call
        self._ids = 0
        self.stuck_total = 0  # calls that ever passed their deadline (a counter for metrics)

    @staticmethod
    def _pool(lane: str) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"dataplane-{lane}")

    def stuck(self) -> list[StuckCall]:
        return sorted(self._stuck.values(), key=lambda c: c.started)

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` on its method's lane, within its deadline."""
        method = getattr(fn, "__name__", "call")
        lane = lane_of(method)
        deadline = self._deadline_for(method)
        loop = asyncio.get_running_loop()
        self._ids += 1
        call_id = self._ids
        where: dict[str, int] = {}

        def work() -> Any:
            where["thread"] = threading.get_ident()
            try:
                return fn(*args, **kwargs)
            finally:
                where["returned"] = 1  # before `_returned` is queued: read on the loop below
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (nodeosd stopped)
                    loop.call_soon_threadsafe(self._returned, call_id)

        fut = loop.run_in_executor(self._pools[lane], functools.partial(work))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), deadline)
        except TimeoutError:
            pass
        if "returned" in where:
            # It returned as the deadline passed (the loop stalled, or the worker was descheduled
            # before completing its future): `_returned` may have run already, so a call named
            # stuck now would stay named for ever (CI's soak, 2026-12-01: `describe` "stuck" 600 s
            # after it returned). Its future completes at once.
            return await fut
        # Past the deadline: the worker stays in the call; the lane gets a new one.
        fut.add_done_callback(_quiet)
        call = StuckCall(method, lane, time.time() - deadline, where.get("thread"))
        self._stuck[call_id] = call
        self.stuck_total += 1
        old, self._pools[lane] = self._pools[lane], self._pool(lane)
        old.shutdown(wait=False)
        self._log_stuck(call, deadline)
        raise OperationFailed(
            f"data plane call {method} did not return within {deadline:.0f} s; it is left to finish "
            f"on its own and the node goes on without it (see `nodeos status` and the journal)",
            field="dataplane",
        )

    def _returned(self, call_id: int) -> None:
        call = self._stuck.pop(call_id, None)
        if call is not None:
            LOG.warning(
                "data plane call %s returned at last, %.0f s after it started",
                call.method,
                time.time() - call.started,
            )

    @staticmethod
    def _log_stuck(call: StuckCall, deadline: float) -> None:
        frames = sys._current_frames()
        frame = frames.get(call.thread_id) if call.thread_id is not None else None
        py = "".join(traceback.format_stack(frame)) if frame is not None else "(not started)\n"
        kernel = "\n".join(blocked_tasks()) or "(no task of nodeosd in D state, or /proc not readable)"
        LOG.error(
            "data plane call %s (lane %s) did not return within %.0f s; its stack:\n%sblocked tasks:\n%s",
            call.method,
            call.lane,
            deadline,
            py,
            kernel,
        )

    def shutdown(self) -> None:
        for pool in self._pools.values():
            # A stuck call's thread never joins: waiting for it would hang the daemon's stop.
            pool.shutdown(wait=not self._stuck)


def _quiet(fut: Any) -> None:
    if not fut.cancelled():
        fut.exception()  # read, so that asyncio does not log it as never retrieved
