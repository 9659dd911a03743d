"""The local API: framed msgpack requests over a root-only unix socket, routed to services.

A bad frame (oversized, not msgpack, wrong version, bad types) is answered with an error and
logged; the connection is closed when the stream can no longer be trusted (after a bad
length or a truncated body), kept otherwise. Nothing a client sends can stop the daemon.

Memory and connections are bounded: a connection that sends no request for IDLE_TIMEOUT_S
is closed, a frame body must arrive within FRAME_TIMEOUT_S, and the bodies being received
by all connections together may not exceed MAX_BUFFERED bytes (a client that would pass it
gets `busy` and is closed): 24 clients holding partial 16 MiB frames cannot take 400 MB.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nodeos.errors import EnvironmentProblem, NodeosError
from nodeos.rpc import framing
from nodeos.store.lmdb_store import storage_error

from .logsetup import fields

LOG = logging.getLogger("nodeosd.api")
_LEN = struct.Struct(">I")
_UCRED = struct.Struct("3i")
IDLE_TIMEOUT_S = 60.0
FRAME_TIMEOUT_S = 30.0
MAX_BUFFERED = 64 << 20  # struct ucred: pid, uid, gid
Handler = Callable[[dict[str, Any]], Awaitable[Any]]


def api_definitions() -> dict[str, Any]:
    """The typed definitions of the API's methods (nodeos/api/), by name. Without msgspec (an
    image built before it was a dependency) requests are still checked, by their handlers."""
    try:
        from nodeos.api.registry import METHODS
    except ImportError as exc:
        LOG.error("the API's typed definitions cannot be loaded (%s): handlers check requests alone", exc)
        return {}
    return dict(METHODS)


def prepare_socket_path(path: Path) -> None:
    """Create the parent (0700) if needed; refuse to steal a live daemon's socket."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(parents=True, mode=0o700)
        os.chmod(parent, 0o700)  # mkdir's mode is filtered by the umask
    if path.exists() or path.is_symlink():
        st = os.lstat(path)
        if not stat.S_ISSOCK(st.st_mode):
            raise EnvironmentProblem(f"{path} exists and is not a socket", field="api_socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: left by a daemon that died
        else:
            raise EnvironmentProblem(f"another daemon answers on {path}", field="api_socket")
        finally:
            probe.close()


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The connecting process's uid (SO_PEERCRED), None if the kernel does not say."""
    sock = writer.get_extra_info("socket")
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except (OSError, AttributeError):
        return None
    return int(_UCRED.unpack(raw)[1])


class ApiServer:
    def __init__(
        self,
        path: Path,
        max_frame: int = framing.DEFAULT_MAX_FRAME,
        *,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        frame_timeout_s: float = FRAME_TIMEOUT_S,
        max_buffered: int = MAX_BUFFERED,
    ) -> None:
        self.path = path
        self.max_frame = max_frame
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.max_buffered = max_buffered
        self.buffered = 0  # bytes of frame bodies being received or handled, all connections
        self.idle_closed = 0
        self.busy_refused = 0
        self.routes: dict[str, Handler] = {}
        self._server: asyncio.AbstractServer | None = None
        self._bound = False  # only the daemon that bound the socket may remove it
        self._conns: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.bad_frames = 0
        self.errors: dict[str, int] = {}  # answered errors by code (for metrics)
        self.refused = 0  # connections from users other than root / the daemon's own
        self.allowed_uids = {0, os.geteuid()}
        self.definitions = api_definitions()  # method -> nodeos.api.spec.Method: its request's type

    def counters(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "bad_frames": self.bad_frames,
            "errors": dict(self.errors),
            "refused": self.refused,
            "idle_closed": self.idle_closed,
            "busy_refused": self.busy_refused,
        }

    def _count_error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1

    def add_routes(self, owner: str, routes: dict[str, Handler]) -> None:
        for method, handler in routes.items():
            if method in self.routes:
                raise RuntimeError(f"API method {method!r} of {owner} is already registered")
            self.routes[method] = handler

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request from another way in (the REST endpoint): the same checks, handlers,
        counters and error replies as a request on the socket."""
        return await self._handle(framing.request(None, method, params))

    def undefined(self) -> list[str]:
        """Routes that no definition in nodeos/api/ describes (their requests go unchecked)."""
        return sorted(set(self.routes) - set(self.definitions)) if self.definitions else []

    async def start(self) -> None:
        prepare_socket_path(self.path)
        old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=1 << 16)
            self._bound = True
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._conns):
                t.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        if self._bound:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._bound = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            # The socket's mode is the first guard; the peer's credentials the second (a mode
            # loosened by hand, or a socket passed on, must not open the API to other users).
            uid = peer_uid(writer)
            if uid not in self.allowed_uids:
                self.refused += 1
                LOG.warning("refused an API connection from uid %s", uid, extra=fields(peer_uid=uid))
                await self._send(
                    writer,
                    framing.reply_error(
                        None, {"code": "permission_denied", "message": "the nodeos API is for root only"}
                    ),
                )
                return
            while True:
                held = 0
                try:
                    body, held = await self._read_body(reader)
                except framing.FrameError as exc:
                    # Bad length or truncated: the stream is out of step, answer and hang up.
                    self.bad_frames += 1
                    LOG.warning("bad frame from API client: %s", exc, extra=fields(frame_error=exc.code))
                    await self._send(
                        writer, framing.reply_error(None, {"code": exc.code, "message": str(exc)})
                    )
                    return
                if body is None:
                    return
                try:
                    msg = framing.unpack_body(body)
                except framing.FrameError as exc:
                    # A whole frame that does not decode: the stream is still in step, keep it.
                    self.bad_frames += 1
                    LOG.warning("bad frame from API client: %s", exc, extra=fields(frame_error=exc.code))
                    reply = framing.reply_error(None, {"code": exc.code, "message": str(exc)})
                else:
                    reply = await self._handle(msg)
                finally:
                    self.buffered -= held
                    del body
                if not await self._send(writer, reply):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_body(self, reader: asyncio.StreamReader) -> tuple[bytes | None, int]:
        """(one frame's body, bytes reserved for it); (None, 0) on a clean end of stream between
        frames or an idle client. The caller gives the reservation back once it is done."""
        try:
            # asyncio.timeout, not wait_for: no task per read (two reads per request).
            async with asyncio.timeout(self.idle_timeout_s):
                header = await reader.readexactly(_LEN.size)
        except TimeoutError:
            self.idle_closed += 1
            LOG.debug("closing an API connection idle for %.0f s", self.idle_timeout_s)
            return None, 0
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return None, 0
            raise framing.FrameError("connection closed inside a frame header") from None
        (length,) = _LEN.unpack(header)
        if length > self.max_frame:
            raise framing.FrameError(
                f"frame of {length} bytes exceeds the limit of {self.max_frame}", code="too_large"
            )
        if self.buffered + length > self.max_buffered:
            self.busy_refused += 1
            raise framing.FrameError(
                f"the daemon is receiving {self.buffered} bytes of requests already; try again", code="busy"
            )
        self.buffered += length
        try:
            async with asyncio.timeout(self.frame_timeout_s):
                return await reader.readexactly(length), length
        except TimeoutError:
            self.buffered -= length
            raise framing.FrameError(
                f"frame body not received within {self.frame_timeout_s:.0f} s", code="timeout"
            ) from None
        except BaseException as exc:
            self.buffered -= length
            if isinstance(exc, asyncio.IncompleteReadError):
                raise framing.FrameError("connection closed inside a frame body") from None
            raise

    async def _send(self, writer: asyncio.StreamWriter, obj: dict[str, Any]) -> bool:
        try:
            data = framing.pack(obj)
        except Exception as exc:  # a handler returned something msgpack cannot carry
            LOG.error("reply cannot be encoded: %s", exc)
            data = framing.pack(
                framing.reply_error(obj.get("id"), {"code": "failed", "message": "reply encoding failed"})
            )
        try:
            writer.write(data)
            await writer.drain()
            return True
        except (ConnectionError, OSError):
            return False

    async def _handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        req_id = msg.get("id")
        if not isinstance(req_id, (int, str, type(None))):
            req_id = None
        try:
            req_id, method, params = framing.check_request(msg)
        except framing.FrameError as exc:
            self.bad_frames += 1
            LOG.warning("bad request: %s", exc, extra=fields(frame_error=exc.code))
            return framing.reply_error(req_id, {"code": exc.code, "message": str(exc)})
        handler = self.routes.get(method)
        if handler is None:
            self._count_error("bad_input")
            return framing.reply_error(
                req_id,
                {
                    "code": "bad_input",
                    "message": f"unknown method {method!r}",
                    "field": "method",
                    "allowed": sorted(self.routes),
                },
            )
        self.requests += 1
        definition = self.definitions.get(method)
        try:
            if definition is not None:
                from nodeos.api.check import check_request

                check_request(definition, params)  # bad input: BadInput naming the field, as below
            result = await handler(params)
        except NodeosError as err:
            LOG.info("%s: %s", method, err.message, extra=fields(method=method, code=err.code))
            self._count_error(err.code)
            return framing.reply_error(req_id, err.to_dict())
        except Exception as exc:
            known = storage_error(exc)  # a full disk or a failing LMDB: its own code, not "internal"
            if known is not None:
                LOG.error("%s: %s", method, known.message, extra=fields(method=method, code=known.code))
                self._count_error(known.code)
                return framing.reply_error(req_id, known.to_dict())
            # A bug: report it, keep serving.
            LOG.exception("%s failed unexpectedly", method, extra=fields(method=method))
            self._count_error("internal")
            return framing.reply_error(
                req_id, {"code": "failed", "message": f"internal error: {type(exc).__name__}: {exc}"}
            )
        return framing.reply_ok(req_id, result)
