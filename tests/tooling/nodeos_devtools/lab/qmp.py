"""A small client of QEMU's monitor protocol (QMP) over a lab VM's qmp.sock, for what only the
"hardware" can do: pull an NVMe drive out of a running VM and push it back (hot-unplug), make
one report a SMART critical warning.

QMP serves one client at a time on the lab's socket (server=on, wait=off): every call connects,
negotiates capabilities, runs its commands and closes. A file lock next to the socket
serialises callers across processes.
"""

from __future__ import annotations

import fcntl
import json
import socket
import time
from pathlib import Path
from typing import Any

from nodeos.errors import OperationFailed
from nodeos_devtools.lab import qemu


class QmpError(OperationFailed):
    """QEMU refused a command, or its monitor did not answer."""


class _Quiet(QmpError):
    """Nothing arrived within the read timeout."""


class Qmp:
    """One connection; use as a context manager."""

    def __init__(self, sock_path: Path, timeout: float = 30.0) -> None:
        self.sock_path = Path(sock_path)
        self.timeout = timeout
        self.events: list[dict[str, Any]] = []
        self._buf = b""
        self._sock: socket.socket | None = None
        self._lock: Any = None

    def __enter__(self) -> Qmp:
        lock_path = self.sock_path.with_suffix(".lock")
        lock_path.touch(exist_ok=True)
        self._lock = open(lock_path)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(str(self.sock_path))
        except OSError as e:
            s.close()
            self._unlock()
            raise QmpError(f"QMP socket {self.sock_path}: {e}") from e
        self._sock = s
        self._read()  # the greeting
        self.execute("qmp_capabilities")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _read(self, timeout: float | None = None) -> dict[str, Any]:
        assert self._sock is not None
        self._sock.settimeout(timeout if timeout is not None else self.timeout)
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError as e:
                raise _Quiet(f"QMP {self.sock_path}: no answer") from e
            if not chunk:
                raise QmpError(f"QMP {self.sock_path}: connection closed")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return dict(json.loads(line))

    def execute(self, cmd: str, **arguments: Any) -> Any:
        """Run one command; its `return`, or QmpError with QEMU's description."""
        assert self._sock is not None
        msg: dict[str, Any] = {"execute": cmd}
        if arguments:
            msg["arguments"] = arguments
        self._sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            got = self._read()
            if "event" in got:
                self.events.append(got)
                continue
            if "error" in got:
                raise QmpError(f"QMP {cmd}: {got['error'].get('desc', got['error'])}")
            return got.get("return")

    def hmp(self, line: str) -> str:
        """A human monitor command (drive_add has no plain QMP form for a legacy -drive)."""
        out = str(self.execute("human-monitor-command", **{"command-line": line}) or "")
        if out.strip() and "OK" not in out:
            raise QmpError(f"QMP {line!r}: {out.strip()}")
        return out

    def wait_event(self, name: str, match: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The first event `name` whose data contains `match` (already seen ones count)."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events:
                data = ev.get("data") or {}
                if ev.get("event") == name and all(data.get(k) == v for k, v in match.items()):
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise QmpError(f"QMP {self.sock_path}: no {name} {match} within {timeout:.0f} s")
            try:
                got = self._read(timeout=min(left, 5.0))
            except _Quiet:
                continue  # a quiet interval: look at the deadline again
            if "event" in got:
                self.events.append(got)


def unplug_drive(sock: Path, i: int, timeout: float) -> None:
    """Hot-unplug the VM's i-th NVMe controller; returns once QEMU removed it."""
    dev = qemu.drive_device_id(i)
    with Qmp(sock) as q:
        q.execute("device_del", id=dev)
        # The guest has to let go of the controller (ACPI eject) before QEMU removes it.
        q.wait_event("DEVICE_DELETED", {"device": dev}, timeout)


def plug_drive(sock: Path, i: int, path: str, serial: str) -> None:
    """Hot-plug the i-th NVMe controller again, on the same backing file and serial."""
    with Qmp(sock) as q:
        try:  # QEMU drops a -drive backend with its device: add it again
            q.hmp(f"drive_add 0 {qemu.drive_backend(i, path)}")
        except QmpError as e:
            if "Duplicate" not in e.message:
                raise
        driver, *opts = qemu.drive_device(i, serial).split(",")
        q.execute("device_add", driver=driver, **dict(o.split("=", 1) for o in opts))


def set_critical_warning(sock: Path, i: int, bits: int) -> None:
    """Set the SMART critical warning the i-th NVMe controller reports (QEMU's
    `smart_critical_warning`; 0 clears it): a drive that says it is failing, still working."""
    with Qmp(sock) as q:
        path = f"/machine/peripheral/{qemu.drive_device_id(i)}"
        q.execute("qom-set", path=path, property="smart_critical_warning", value=bits)
