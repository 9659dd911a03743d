"""Run a piece of work inside a named network namespace.

setns(2) switches only the calling thread, so the work runs on a short-lived thread that
enters the namespace first; sockets it opens stay bound to that namespace. `None` means
the namespace this process already lives in (the normal case on a node).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from nodeos.errors import EnvironmentProblem

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"


def _setns(name: str) -> None:
    path = os.path.join(NETNS_DIR, name)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise EnvironmentProblem(f"network namespace {name} does not exist ({path})") from None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise EnvironmentProblem(f"cannot enter network namespace {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(netns: str | None, fn: Callable[[], T]) -> T:
    if netns is None:
        return fn()
    box: dict[str, object] = {}

    def worker() -> None:
        try:
            _setns(netns)
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=worker, name=f"netns-{netns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]
