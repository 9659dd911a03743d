"""Crash injection for tests: NODEOS_CRASH_AT=<step>[,<step>...] makes the daemon die with
os._exit(137) (what SIGKILL looks like to systemd and to tests) the moment it reaches that
step. Step names are "<operation>:<step>", listed in docs/operations.md and STEPS below."""

from __future__ import annotations

import logging
import os
import sys

ENV = "NODEOS_CRASH_AT"

# Every crash point the node service passes, in order per operation.
STEPS: dict[str, tuple[str, ...]] = {
    "pool.create": ("intent", "pool-created", "done"),
    "pool.delete": ("intent", "pool-deleted", "done"),
    "volume.create": ("intent", "volume-created", "export-applied", "done"),
    "volume.clone": ("intent", "clone-created", "export-applied", "done"),
    "volume.resize": ("intent", "volume-resized", "export-applied", "done"),
    "volume.delete": ("intent", "export-removed", "volume-deleted", "done"),
    "volume.snapshot": ("intent", "snapshot-created", "done"),
    "snapshot.delete": ("intent", "snapshot-deleted", "done"),
    "volume.grant": ("intent", "export-applied", "done"),
    "volume.replica": ("intent", "replica-exported", "front-exported", "done"),
    "volume.mirror": ("intent", "remotes-attached", "mirror-assembled", "front-exported", "done"),
    "volume.revoke": ("intent", "export-applied", "done"),
    "volume.retarget": ("intent", "replica-exported", "done"),
    "volume.promote": ("intent", "replica-unexported", "mirror-assembled", "front-exported", "done"),
    "volume.demote": ("intent", "front-fenced", "mirror-stopped", "leg-wiped", "replica-exported", "done"),
    "volume.rejoin": ("intent", "remotes-attached", "done"),
    "orphan.remove": ("intent", "exports-removed", "done"),
    "snapshot.freeze": ("frozen",),  # the primary's agent, writes of a mirror just frozen
    "host.add": ("done",),
    "host.remove": ("done",),
}
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
