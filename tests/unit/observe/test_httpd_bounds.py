"""The `/metrics` HTTP server's bounds (issue 25, probe 2), on a real socket: idle connections
beyond MAX_CONNECTIONS are let go at once (oldest first), the rest after the idle timeout, the
threads stay about MAX_CONNECTIONS, and a scrape is answered while strangers sit idle."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import make_server

import pytest

from nodeos.observe import httpd

IDLE = 3.0  # the test's idle timeout (the product's is 5 s): room for a loaded machine


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"up 1\n"]


class _Handler(httpd.QuietHandler):
    timeout = IDLE


@pytest.fixture
def server() -> Iterator[httpd.BoundedServer]:
    srv = make_server("127.0.0.1", 0, _app, httpd.BoundedServer, _Handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_connections_are_bounded_and_let_go_and_a_scrape_still_answers(
    server: httpd.BoundedServer,
) -> None:
    port = server.server_address[1]
    threads_before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3 * httpd.MAX_CONNECTIONS)]
    try:
        t0 = time.monotonic()  # every connection judged before any has been idle for IDLE
        while server.evicted < 2 * httpd.MAX_CONNECTIONS and time.monotonic() - t0 < IDLE * 0.8:
            time.sleep(0.02)
        assert server.evicted == 2 * httpd.MAX_CONNECTIONS
        assert threading.active_count() - threads_before <= httpd.MAX_CONNECTIONS + 1
        assert sum(_closed(s) for s in idle) == 2 * httpd.MAX_CONNECTIONS  # the oldest, at once
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert r.read() == b"up 1\n"
        deadline = time.monotonic() + 3 * IDLE
        while not all(_closed(s) for s in idle) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_closed(s) for s in idle)  # the rest by the idle timeout
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads_before


def test_the_products_handler_has_the_idle_timeout() -> None:
    """The test above shortens it; the handler /metrics is served with keeps a few seconds."""
    assert httpd.QuietHandler.timeout == httpd.IDLE_TIMEOUT_S and 0 < httpd.IDLE_TIMEOUT_S <= 10
