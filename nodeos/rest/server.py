"""The REST endpoint's HTTPS server: the bounded wsgiref server of `/metrics` (a thread per
connection, idle connections closed, at most MAX_CONNECTIONS at once), TLS per connection in
its own thread (a slow handshake holds no other client), each request handed to the event loop
(`handle`) and its answer awaited. Nothing about a request is logged but its route and status:
never a header (the bearer token), never a body."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from wsgiref.simple_server import make_server

import msgspec

from nodeos.observe.httpd import BoundedServer, BoundedV6Server, QuietHandler

LOG = logging.getLogger("nodeosd.rest")
MAX_BODY = 1 << 20  # a request is parameters, not data
# An answer waits for its method: a delete's teardown up to `wait` (at most 3600 s) and a margin.
ANSWER_TIMEOUT_S = 3700.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 422: "Unprocessable Entity",
            500: "Internal Server Error", 503: "Service Unavailable", 504: "Gateway Timeout",
            507: "Insufficient Storage"}  # fmt: skip

# (HTTP method, path, body, bearer token or None) -> (status, JSON body)
Handle = Callable[[str, str, bytes, str | None], Awaitable[tuple[int, bytes]]]


def error_body(code: str, message: str, **more: Any) -> bytes:
    """The one error shape of the REST endpoint (docs/api.md), as JSON."""
    return msgspec.json.encode({"error": {"code": code, "message": message, **more}})


class _LogStream(io.StringIO):
    """wsgiref's error stream: a client that hangs up before its answer is routine (a line at
    debug level), not a traceback on nodeosd's stderr per connection."""

    def write(self, s: str) -> int:
        if s.strip():
            LOG.debug("REST connection: %s", s.strip().splitlines()[-1])
        return len(s)


class RestHandler(QuietHandler):
    def get_stderr(self) -> Any:
        return _LogStream()


class _TlsMixin:
    """Wraps each accepted connection in TLS inside its own thread; `context()` gives the
    context to use (re-read when the certificate files change: a CA roll)."""

    context: Callable[[], ssl.SSLContext]

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(QuietHandler.timeout)
        try:
            tls = self.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            LOG.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        # wrap_socket detached `request`: the bounded server must evict (shut down) this one.
        open_: dict[int, Any] = getattr(self, "_open", {})
        with getattr(self, "_lock", contextlib.nullcontext()):
            if id(request) in open_:
                open_[id(request)] = tls
        try:
            super().finish_request(tls, client_address)  # type: ignore[misc]
        finally:
            with contextlib.suppress(OSError):
                tls.close()


class TlsServer(_TlsMixin, BoundedServer):
    pass


class TlsV6Server(_TlsMixin, BoundedV6Server):
    pass


class CertFiles:
    """An SSL server context of a certificate and key on disk, made again when either changes."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert, self.key = cert, key
        self._lock = threading.Lock()
        self._stamp: tuple[float, float] | None = None
        self._ctx: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        stamp = (os.stat(self.cert).st_mtime, os.stat(self.key).st_mtime)
        with self._lock:
            if self._ctx is None or stamp != self._stamp:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                ctx.load_cert_chain(self.cert, self.key)
                self._ctx, self._stamp = ctx, stamp
            return self._ctx


class RestServer:
    def __init__(self, host: str, port: int, certs: CertFiles, handle: Handle) -> None:
        self.host, self.port = host, port
        self.certs = certs
        self.handle = handle
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: Any = None
        self.requests = 0

    def start(self) -> None:
        """Bind and serve (OSError if the address cannot be bound)."""
        self.loop = asyncio.get_running_loop()
        self.certs.context()  # a certificate that does not load is said now, not per connection
        cls = TlsV6Server if ":" in self.host else TlsServer
        server = make_server(self.host, self.port, self._app, cls, RestHandler)
        server.context = self.certs.context
        self.server = server
        self.port = server.server_port
        threading.Thread(target=server.serve_forever, name="rest-https", daemon=True).start()

    async def stop(self) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.shutdown)
            self.server.server_close()
            self.server = None

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        path = str(environ.get("PATH_INFO", ""))
        status, body = self._answer(method, path, environ)
        self.requests += 1
        LOG.debug("%s %s -> %d", method, path, status)
        start_response(
            f"{status} {_REASONS.get(status, 'Error')}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    def _answer(self, method: str, path: str, environ: dict[str, Any]) -> tuple[int, bytes]:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            return 413, error_body("too_large", f"a request body is at most {MAX_BODY} bytes")
        body = environ["wsgi.input"].read(length) if length else b""
        auth = str(environ.get("HTTP_AUTHORIZATION") or "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        assert self.loop is not None
        fut = asyncio.run_coroutine_threadsafe(self.handle(method, path, body, bearer), self.loop)
        try:
            return fut.result(ANSWER_TIMEOUT_S)
        except Exception as exc:  # the loop closed under it, or a bug: an answer all the same
            LOG.error("REST %s %s failed: %s", method, path, type(exc).__name__)
            return 500, error_body("internal", f"internal error: {type(exc).__name__}")
