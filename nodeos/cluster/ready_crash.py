"""Crash injection for the kill -9 tests of the Raft driver: when CRASH_FILE_ENV names a file, the
driver reads it at every step of a Ready that writes entries and dies (as SIGKILL would) at the
step it names (tests/process/test_cluster_ready_crash.py)."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("nodeosd.cluster")

CRASH_FILE_ENV = "NODEOS_RAFT_CRASH_FILE"
READY_STEPS = ("taken", "early-sent", "written", "sent", "applied")


def crash_point(crash_file: str, step: str) -> None:
    assert step in READY_STEPS
    try:
        with open(crash_file) as f:
            wanted = f.read().strip()
    except OSError:
        return
    if wanted == step:
        log.critical("crash injected at raft ready step %s (%s)", step, CRASH_FILE_ENV)
        for h in logging.getLogger().handlers:
            h.flush()
        os._exit(137)
