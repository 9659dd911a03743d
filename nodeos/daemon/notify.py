"""systemd's notify protocol (sd_notify), spoken directly: one datagram of KEY=VALUE lines
to the unix socket named by $NOTIFY_SOCKET ('@' = abstract namespace). No dependency."""

from __future__ import annotations

import os
import socket

READY_WAIT_S = 2.0  # READY=1 and STOPPING=1 wait this long for room in a full queue


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

    def send(self, wait_s: float = 0.0, **fields: str | int) -> bool:
        """Send e.g. READY=1, STATUS=...; returns False when not under systemd or on error.

        Never blocks the caller (the daemon's event loop) longer than `wait_s`: a datagram to a
        receiver whose queue is full (net.unix.max_dgram_qlen, 10 here) blocks a plain sendto
        until it drains, and a reader that stalls froze the whole daemon for minutes (seen in
        tests/spdk/test_spdk_dataplane_watch.py, whose reader drains only now and then). A
        status line or a watchdog ping that does not fit is dropped (the next one follows);
        READY and STOPPING wait a little for room."""
        if not self.address:
            return False
        msg = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.settimeout(wait_s)  # 0: non-blocking
            self._sock.sendto(msg, self._target())
            return True
        except OSError:  # includes BlockingIOError and TimeoutError: not sent
            return False

    def ready(self, status: str) -> bool:
        return self.send(READY_WAIT_S, READY=1, STATUS=status, MAINPID=os.getpid())

    def status(self, status: str) -> bool:
        return self.send(STATUS=status)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)

    def stopping(self, status: str = "stopping") -> bool:
        return self.send(READY_WAIT_S, STOPPING=1, STATUS=status)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
