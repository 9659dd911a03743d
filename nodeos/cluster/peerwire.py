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
HANDSHAKE_TIMEOUT = 5.0  # the peer handshake (hello .. welcome), after TLS
# TLS on the peer port: a real handshake takes a round trip or two; a silent stranger is let
# go of after this. Closing a TLS connection waits at most SHUTDOWN for the peer's
# close_notify (asyncio's default, 30 s, kept a stranger's fd that long). The TLS bound is the
# dialler's own (HANDSHAKE_TIMEOUT covers its connect, TLS and hello): a shorter one here cut
# the handshakes of a node short of CPU that its peer still waited for (TCG lab: 3 s was not
# enough for a loaded VM's TLS); the caps per source and in all bound a stranger's cost.
TLS_HANDSHAKE_TIMEOUT = HANDSHAKE_TIMEOUT
TLS_SHUTDOWN_TIMEOUT = 2.0
MAX_HANDSHAKING = 32  # connections not yet authenticated (TLS or peer handshake), all sources
MAX_PENDING_PER_SOURCE = 8  # of those, from one address
MAX_INBOUND = 256
LISTEN_BACKLOG = 1024  # the kernel's queue of connections not yet accepted
ACCEPT_BATCH = 16  # accepted per wake-up of the event loop
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
