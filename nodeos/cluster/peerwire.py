"""What every peer connection shares: handshake limits, what a stranger may cost, and small
socket helpers (nodeos/cluster/transport.py, peersender.py, peerserver.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from nodeos.errors import BadInput
from nodeos.rpc.framing import pack

log = logging.getLogger("nodeos.cluster.transport")

HANDSHAKE_MAX_FRAME = 4096
HANDSHAKE_TIMEOUT = 5.0
MAX_HANDSHAKING = 32
MAX_INBOUND = 256
LOG_BURST, LOG_WINDOW_S = 10, 10.0


class RateLimitedLog:
    """At most `burst` lines per `window` seconds; the next line says how many were dropped."""

    def __init__(self, logger: logging.Logger, burst: int = LOG_BURST, window: float = LOG_WINDOW_S) -> None:
        self.logger, self.burst, self.window = logger, burst, window
        self._start = 0.0
        self._count = 0
        self.suppressed = 0

    def log(self, level: int, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._start >= self.window:
            if self.suppressed:
                self.logger.warning("%d similar peer-port messages suppressed", self.suppressed)
            self._start, self._count, self.suppressed = now, 0, 0
        if self._count >= self.burst:
            self.suppressed += 1
            return
        self._count += 1
        self.logger.log(level, msg, *args)


def parse_address(addr: str, field: str = "address") -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"{field} must be HOST:PORT, got {addr!r}", field=field)
    return host.strip("[]"), int(port)


async def _send_error(
    writer: asyncio.StreamWriter, code: str, message: str, field: str | None = None
) -> None:
    err = {"code": code, "message": message}
    if field is not None:
        err["field"] = field
    with contextlib.suppress(Exception):
        writer.write(pack({"t": "error", "error": err}))
        await asyncio.wait_for(writer.drain(), 1.0)


async def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 1.0)
