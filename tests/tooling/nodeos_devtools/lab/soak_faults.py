"""The soak's faults, done to a lab for real and undone: power-off (then start), network cut
(then heal), `kill -9` of nodeosd (then systemd restarts it), a drive pulled (then plugged back
and the VM power-cycled). Keeps which fault is in force on which storage VM. And the host's
own: a CPU hog beside the lab."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from nodeos_devtools.lab.lab import Lab


class NotInForce(Exception):
    """A heal of a fault that is not in force (its injection failed): nothing to undo."""


class Faults:
    def __init__(self, lab: Lab, daemon_bound_s: float) -> None:
        self.lab = lab
        self.daemon_bound_s = daemon_bound_s
        self.down: dict[str, str] = {}  # storage VM -> the fault in force

    def inject(self, kind: str, vm: str) -> None:
        if kind == "power":
            self.lab.kill(vm)
        elif kind == "cut":
            self.lab.cut(vm)
        elif kind == "kill":
            # The unit's Restart= brings it back; its ExecStopPost fences the node's front ends.
            self.lab.sh(vm, "systemctl kill -s KILL nodeosd.service", timeout=60)
        elif kind == "drive":
            self.lab.unplug(vm, self.lab.serials(vm)[0])
        else:
            raise ValueError(f"unknown fault {kind!r}")
        self.down[vm] = kind

    def undo(self, vm: str, kind: str) -> None:
        """Undo `kind` on `vm`; returns once its nodeosd answers again."""
        if self.down.get(vm) != kind:
            raise NotInForce(f"{vm} has no {kind} fault in force (its injection failed)")
        if kind == "cut":
            self.lab.heal(vm)
        elif kind in ("power", "drive"):
            if kind == "drive":
                # The drive goes back in its bay, then the VM is power-cycled: the pool's
                # device-mapper tables still point at the controller that went away, and only a
                # boot rebuilds them (tests/lab/test_drive_unplug.py does the same).
                serial = self.lab.serials(vm)[0]
                if serial in self.lab.spec(vm).unplugged:
                    self.lab.plug(vm, serial)
                self.lab.kill(vm)
            self.lab.start(vm)
        self.wait_daemon(vm, self.daemon_bound_s)
        self.down.pop(vm, None)

    def wait_daemon(self, vm: str, bound: float) -> None:
        """Until `nodeos status` answers on vm (after a restart by systemd or a boot)."""
        self.lab.sh(
            vm,
            "t=0; until nodeos status --json >/dev/null 2>&1; do t=$((t+2)); "
            f"[ $t -gt {int(bound)} ] && exit 1; sleep 2; done",
            timeout=bound + 60,
        )


@contextmanager
def cpu_hog(on: bool) -> Iterator[None]:
    """One busy process on the host beside the lab (the one hang seen came on the slowest run)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
