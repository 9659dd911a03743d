"""The HTTP server under `/metrics`: wsgiref with a thread per connection, bounded.

Anyone who can reach the port can open connections, so what they cost is bounded: a
connection that sends nothing for IDLE_TIMEOUT_S is closed (the socket's timeout, per read
and write), and at most MAX_CONNECTIONS are served at once. One more evicts the oldest (its
socket is shut down, which wakes its thread at once): a real scrape takes milliseconds, so
idle connections cannot keep Prometheus out, and threads stay at about MAX_CONNECTIONS.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import threading
from collections import OrderedDict
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

log = logging.getLogger("nodeosd.observe")

IDLE_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 16


class QuietHandler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S  # StreamRequestHandler sets it on the connection's socket

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape would flood the journal


class BoundedServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False
    # socketserver's 5 drops a burst's handshakes, which then trickle in on the kernel's
    # SYN-ACK retries for half a minute: queued, they are judged (kept or evicted) at once.
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[int, socket.socket] = OrderedDict()  # oldest first
        self.evicted = 0
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            while len(self._open) >= MAX_CONNECTIONS:
                _, oldest = self._open.popitem(last=False)
                self.evicted += 1
                with contextlib.suppress(OSError):  # already gone
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread's read returns now; it closes it
            self._open[id(request)] = request
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open.pop(id(request), None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # An idle or evicted connection ends in a timeout or a reset: routine, not a traceback
        # on stderr per connection.
        log.debug("metrics connection from %s ended", client_address, exc_info=True)


class BoundedV6Server(BoundedServer):
    address_family = socket.AF_INET6
