"""systemd's notify protocol (sd_notify), spoken directly: one datagram of KEY=VALUE lines
to the unix socket named by $NOTIFY_SOCKET ('@' = abstract namespace). No dependency."""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        self.address = env.get("NOTIFY_SOCKET") or None
        usec = env.get("WATCHDOG_USEC")
        wd_pid = env.get("WATCHDOG_PID")
        # WATCHDOG_PID names the process systemd expects pings from; ours or unset.
        self.watchdog_usec = (
            int(usec) if usec and usec.isdigit() and (not wd_pid or wd_pid == str(os.getpid())) else 0
        )
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def _target(self) -> str | bytes:
        assert self.address is not None
        if self.address.startswith("@"):
            return b"\0" + self.address[1:].encode()
        return self.address

    def send(self, **fields: str | int) -> bool:
        """Send e.g. READY=1, STATUS=...; returns False when not under systemd or on error."""
        if not self.address:
            return False
        msg = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(msg, self._target())
            return True
        except OSError:
            return False

    def ready(self, status: str) -> bool:
        return self.send(READY=1, STATUS=status, MAINPID=os.getpid())

    def status(self, status: str) -> bool:
        return self.send(STATUS=status)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)

    def stopping(self, status: str = "stopping") -> bool:
        return self.send(STOPPING=1, STATUS=status)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
