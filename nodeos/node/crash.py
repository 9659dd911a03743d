"""Crash injection for tests: NODEOS_CRASH_AT=<step>[,<step>...] makes the daemon die with
os._exit(137) (what SIGKILL looks like to systemd and to tests) the moment it reaches that
step. Step names are "<operation>:<step>", listed in docs/operations.md and STEPS below."""

from __future__ import annotations

import logging
import os
import sys

from nodeos.node import opspec

ENV = "NODEOS_CRASH_AT"

# Every crash point the node service passes, in order per operation (nodeos/node/opspec.py).
STEPS: dict[str, tuple[str, ...]] = opspec.crash_points()
ALL = tuple(f"{op}:{step}" for op, steps in STEPS.items() for step in steps)


def point(name: str) -> None:
    assert name in ALL, f"crash point {name} is not declared in STEPS"
    wanted = os.environ.get(ENV)
    if wanted and name in wanted.split(","):
        logging.getLogger("nodeosd").critical("crash injected at %s (%s)", name, ENV)
        for h in logging.getLogger().handlers:
            h.flush()
        sys.stderr.flush()
        os._exit(137)
