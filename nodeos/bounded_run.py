"""A command run with a deadline that holds even when the command is stuck in the kernel.

`subprocess.run(timeout=...)` kills the child at the deadline and then waits for it to exit,
without a bound: a child blocked in uninterruptible sleep (D state, e.g. reading a block device
whose I/O is requeued for ever) does not die until the kernel lets it go, and the thread that
called it (the node's data plane worker) waits with it. Here the wait after the kill is short;
a child still alive is handed to a reaper thread and the caller gets an error naming it, with
its kernel stack where /proc shows it (root).
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from nodeos.errors import EnvironmentProblem, OperationFailed

LOG = logging.getLogger("nodeosd.run")
T = TypeVar("T")
KILL_WAIT_S = 2.0


def kernel_stack(pid: int, proc: Path = Path("/proc")) -> str:
    """`pid`'s kernel stack and state, as /proc shows them ("" where it does not)."""
    try:
        state = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in (proc / str(pid) / "status").read_text().splitlines()
                if ln.startswith("State:")
            ),
            "?",
        )
    except OSError:
        return ""
    try:
        stack = (proc / str(pid) / "stack").read_text().strip()
    except OSError:
        stack = "(kernel stack not readable)"
    return f"state {state}\n{stack}"


def _reap(p: subprocess.Popen[str], what: str) -> None:
    rc = p.wait()
    LOG.warning("%s (pid %d) left the kernel at last and exited with %s", what, p.pid, rc)


def run_bounded(
    cmd: Sequence[str], timeout_s: float, env: dict[str, str] | None = None, package: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run `cmd`, capture its output; OperationFailed once `timeout_s` passed, within about
    KILL_WAIT_S more whatever the child does."""
    try:
        p = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    except FileNotFoundError:
        pkg = f" (package {package})" if package else ""
        raise EnvironmentProblem(f"{cmd[0]} is not installed{pkg}") from None
    try:
        out, err = p.communicate(timeout=timeout_s)
        return subprocess.CompletedProcess(list(cmd), p.returncode, out, err)
    except subprocess.TimeoutExpired:
        pass
    stack = kernel_stack(p.pid)
    p.kill()
    try:
        p.communicate(timeout=KILL_WAIT_S)
        why = "killed"
    except subprocess.TimeoutExpired:
        what = " ".join(cmd[:2])
        threading.Thread(target=_reap, args=(p, what), name=f"reap-{p.pid}", daemon=True).start()
        why = "stuck in the kernel, left to exit by itself"
        LOG.error(
            "%s (pid %d) did not finish within %.0f s and cannot be killed; its kernel stack:\n%s",
            what,
            p.pid,
            timeout_s,
            stack or "(not readable)",
        )
    raise OperationFailed(f"{' '.join(cmd[:2])} did not finish within {timeout_s:.0f} s ({why})")


def all_at_once(fn: Callable[[T], object], items: Sequence[T], wait_s: float, what: str) -> None:
    """`fn(item)` for every item, each in a thread of its own, all started together; returns
    once all returned, or raises OperationFailed naming those still running after `wait_s`
    (left to finish by themselves) or the first error."""
    results: dict[int, BaseException | None] = {}

    def one(i: int, item: T) -> None:
        try:
            fn(item)
            results[i] = None
        except BaseException as exc:  # handed to the caller
            results[i] = exc

    threads = [
        threading.Thread(target=one, args=(i, item), name=f"at-once-{i}", daemon=True)
        for i, item in enumerate(items)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + wait_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    late = [str(items[i]) for i, t in enumerate(threads) if t.is_alive()]
    if late:
        raise OperationFailed(f"could not {what} {', '.join(late)} within {wait_s:.0f} s")
    err = next((e for e in results.values() if e is not None), None)
    if err is not None:
        raise err
