"""The inbound side of the peer transport: the listener, the acceptor's handshake, what a
stranger may cost, and serving an authenticated connection (Raft messages and requests).

Part of PeerTransport (nodeos/cluster/transport.py, which describes the protocol); the outbound
side is nodeos/cluster/peersender.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nodeos.cluster.peerauth import NONCE_BYTES, Session, mac, session_keys, transcript
from nodeos.cluster.peerwire import (
    ACCEPT_BATCH,
    HANDSHAKE_MAX_FRAME,
    HANDSHAKE_TIMEOUT,
    LISTEN_BACKLOG,
    MAX_HANDSHAKING,
    MAX_INBOUND,
    MAX_PENDING_PER_SOURCE,
    TLS_HANDSHAKE_TIMEOUT,
    TLS_SHUTDOWN_TIMEOUT,
    RateLimitedLog,
    _close,
    _send_error,
)
from nodeos.cluster.snapshot_stream import Assembler
from nodeos.cluster.tlsca import issuer_cn, node_cn, peer_cn
from nodeos.errors import BadInput, NodeosError
from nodeos.rpc.framing import PROTOCOL_VERSION, FrameError, pack, read_frame

if TYPE_CHECKING:
    from nodeos.cluster.transport import TransportStats

log = logging.getLogger("nodeos.cluster.transport")

RaftHandler = Callable[[int, dict[str, Any]], None]
RequestHandler = Callable[[int, str, dict[str, Any]], Awaitable[Any]]


class _Gate(asyncio.Protocol):
    """The first protocol of every inbound connection: it reads nothing (the TLS layer reads
    the first byte) and hands the connection to the server's admission."""

    def __init__(self, server: PeerServer) -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        self.server._admit(transport)


class PeerServer:
    """Mixin of PeerTransport: the attributes below are the transport's."""

    node_id: int
    cluster_id: str
    advertise: str
    max_frame: int
    snapshots: Assembler
    stats: TransportStats
    blocked: set[int]
    on_raft: RaftHandler
    on_request: RequestHandler
    token_key: Callable[[bytes], bytes | None] | None
    tls_server: ssl.SSLContext | None
    trusted_cas: set[str] | None
    _tls_current: ssl.SSLContext | None
    _accepted: dict[int, bytes]
    _server: asyncio.Server | None
    _inbound: set[asyncio.Task[None]]
    _handshaking: dict[asyncio.Task[None], tuple[str, asyncio.Transport]]  # oldest first
    _stranger_log: RateLimitedLog

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        # Plain TCP: each connection is admitted (or not) before a byte is read, and its TLS
        # handshake is done here with bounded time (see _admit, _upgrade). With TLS in
        # asyncio's listener, connections counted only once TLS completed: a stranger's silent
        # connections cost an fd and a 256 KiB TLS buffer each, unbounded.
        loop = asyncio.get_running_loop()
        # asyncio accepts up to `backlog` connections per wake-up and closes refused ones on the
        # next: a small batch keeps the fds a burst costs at once small. The kernel's queue is
        # made deep again after (listen() on a listening socket only resizes it), so a burst
        # waits there to be judged instead of dropping SYNs, a real peer's among them.
        self._server = await loop.create_server(
            lambda: _Gate(self), host, port, reuse_address=True, backlog=ACCEPT_BATCH
        )
        for ts in self._server.sockets:
            with socket.socket(fileno=os.dup(ts.fileno())) as dup:
                dup.listen(LISTEN_BACKLOG)
        sock = self._server.sockets[0].getsockname()
        if not self.advertise:
            self.advertise = f"{sock[0]}:{sock[1]}"
        return sock[0], sock[1]

    def _admit(self, raw: asyncio.Transport) -> None:
        """A new inbound connection, nothing read yet: refuse it, or make room, or serve it."""
        peer = raw.get_extra_info("peername")
        source = str(peer[0]) if peer else "?"
        if len(self._inbound) >= MAX_INBOUND:
            self._shed(raw, "inbound connections")
            return
        # Not yet authenticated: a few per address, refused beyond (nothing allocated for them:
        # each one admitted costs a TLS buffer of 256 KiB), and a few dozen in all, where the
        # oldest goes: a real peer's handshake takes a round trip, so strangers from many
        # addresses cannot keep it out by their silence.
        if sum(1 for src, _ in self._handshaking.values() if src == source) >= MAX_PENDING_PER_SOURCE:
            self.stats.over_source_cap += 1
            self._shed(raw, "unauthenticated connections from one address")
            return
        if len(self._handshaking) >= MAX_HANDSHAKING:
            oldest = next(iter(self._handshaking))
            self._shed(self._handshaking.pop(oldest)[1], "handshaking connections")
        task = asyncio.get_running_loop().create_task(self._serve(raw))
        self._inbound.add(task)
        self._handshaking[task] = (source, raw)

    async def _upgrade(self, raw: asyncio.Transport) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Streams over the connection, in TLS with the current context (a CA roll changes it)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport: asyncio.BaseTransport = raw
        ctx = self._tls_current
        if ctx is None:
            raw.set_protocol(protocol)
            protocol.connection_made(raw)
            raw.resume_reading()
        else:
            tls = await loop.start_tls(
                raw,
                protocol,
                ctx,
                server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT,
                ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT,
            )
            assert tls is not None
            protocol.connection_made(tls)
            transport = tls
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)  # type: ignore[arg-type]

    async def _serve(self, raw: asyncio.Transport) -> None:
        task = asyncio.current_task()
        try:
            # asyncio logs a cancelled connection task as an error: end quietly on shutdown.
            with contextlib.suppress(asyncio.CancelledError):
                await self._serve_conn(raw)
        finally:
            self._handshaking.pop(task, None)  # type: ignore[arg-type]
            self._inbound.discard(task)  # type: ignore[arg-type]
            raw.abort()  # a no-op once closed; else nothing is left to say to it

    async def _serve_conn(self, raw: asyncio.Transport) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            reader, writer = await asyncio.wait_for(self._upgrade(raw), TLS_HANDSHAKE_TIMEOUT + 1.0)
        except (TimeoutError, OSError) as exc:
            # Silent, gone, or not speaking TLS: closed at once (by _serve), no close_notify.
            self.stats.refused += 1
            self._handshaking.pop(task, None)
            self._stranger_log.log(logging.INFO, "peer TLS handshake abandoned: %s", exc.__class__.__name__)
            return
        try:
            peer, session, joiner = await asyncio.wait_for(
                self._accept_handshake(reader, writer), HANDSHAKE_TIMEOUT
            )
        except (FrameError, NodeosError) as exc:
            self.stats.refused += 1
            self._stranger_log.log(logging.WARNING, "peer handshake refused: %s", exc)
            await _send_error(writer, exc.code, str(exc), getattr(exc, "field", None))
            await _close(writer)
            return
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            self.stats.refused += 1
            self._stranger_log.log(logging.INFO, "peer handshake abandoned: %s", exc.__class__.__name__)
            return
        finally:
            self._handshaking.pop(task, None)
        try:
            await self._serve_session(peer, session, reader, writer, joiner)
        finally:
            await _close(writer)

    def _shed(self, raw: asyncio.BaseTransport, what: str) -> None:
        self.stats.shed += 1
        self._stranger_log.log(
            logging.WARNING,
            "peer port at its limit of %s: closed one from %s",
            what,
            raw.get_extra_info("peername"),
        )
        raw.abort()  # no FIN exchange to wait for: the fd is freed now

    async def _accept_handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, Session, bytes | None]:
        hello = await read_frame(reader, HANDSHAKE_MAX_FRAME)
        if hello is None:
            raise OSError("closed before hello")
        if hello.get("v") != PROTOCOL_VERSION:
            raise FrameError(
                f"unsupported protocol version {hello.get('v')!r}; this node speaks {PROTOCOL_VERSION}",
                code="bad_version",
            )
        if hello.get("t") != "hello":
            raise FrameError("expected a hello frame")
        node, nonce, cluster = hello.get("node"), hello.get("nonce"), hello.get("cluster")
        if type(node) is not int or node <= 0:
            raise FrameError("hello field 'node' must be a positive int")
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            raise FrameError(f"hello field 'nonce' must be {NONCE_BYTES} bytes")
        if cluster != self.cluster_id:
            raise BadInput(f"peer belongs to cluster {cluster!r}, not this one", field="cluster")
        join = hello.get("join")
        gen = hello.get("gen", 0)
        if type(gen) is not int or gen < 0:
            raise FrameError("hello field 'gen' must be a non-negative int")
        key = self._accepted.get(gen, b"")
        if join is None and not key:
            raise self._unknown_generation(gen)
        if join is not None:
            found = self.token_key(join) if self.token_key is not None and isinstance(join, bytes) else None
            if found is None:
                raise BadInput("the join token is unknown, expired or revoked on this node", field="token")
            key = found
        elif self.tls_server is not None:
            cn = peer_cn(writer.get_extra_info("peercert"))
            if cn != node_cn(node):
                raise BadInput(
                    f"peer claims node {node} but its certificate is for {cn or 'nobody'}", field="cluster"
                )
        mine = os.urandom(NONCE_BYTES)
        tr = transcript(self.cluster_id, node, self.node_id, nonce, mine) + ([join] if join else [])
        tr += [str(gen).encode()] if gen and not join else []
        writer.write(
            pack(
                {
                    "t": "challenge",
                    "node": self.node_id,
                    "nonce": mine,
                    "proof": mac(key, b"acceptor", *tr),
                }
            )
        )
        await writer.drain()
        auth = await read_frame(reader, HANDSHAKE_MAX_FRAME)
        if auth is None or auth.get("t") != "auth" or not isinstance(auth.get("proof"), bytes):
            raise FrameError("expected an auth frame")
        if not hmac.compare_digest(auth["proof"], mac(key, b"dialer", *tr)):
            raise FrameError("peer did not prove the cluster secret", code="bad_auth")
        writer.write(pack({"t": "welcome"}))
        await writer.drain()
        session = session_keys(key, nonce, mine, dialer=False)
        session.gen = gen
        session.peer_issuer = issuer_cn(writer.get_extra_info("peercert"))
        return node, session, join

    def _still_trusted(self, session: Session) -> bool:
        if session.gen not in self._accepted:
            return False
        cas = self.trusted_cas
        return cas is None or session.peer_issuer is None or session.peer_issuer in cas

    def _unknown_generation(self, gen: int) -> NodeosError:
        newest = max(self._accepted)
        if gen < newest:
            return BadInput(
                f"the cluster secret of generation {gen} was rotated away (this cluster accepts "
                f"generation {', '.join(map(str, sorted(self._accepted)))}): that node missed the "
                "rotation; remove it and join it again with a fresh token",
                field="secret",
            )
        return FrameError(f"secret generation {gen} is not known here yet", code="bad_auth")

    async def _serve_session(
        self,
        peer: int,
        session: Session,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        joiner: bytes | None = None,
    ) -> None:
        lock = asyncio.Lock()
        pending: set[asyncio.Task[None]] = set()
        try:
            while True:
                try:
                    frame = await read_frame(reader, self.max_frame)
                    if frame is None:
                        return
                    body = session.open(frame)
                except FrameError as exc:
                    self.stats.bad_frames += 1
                    log.warning("peer %d sent a bad frame: %s", peer, exc)
                    await _send_error(writer, exc.code, str(exc))
                    return
                if joiner is None and not self._still_trusted(session):
                    # Its secret generation or its certificate's CA was dropped by a roll.
                    await _send_error(writer, "bad_auth", "the credentials of this connection were rotated")
                    return
                kind = body.get("k")
                if peer in self.blocked:
                    continue
                if kind == "raft" and joiner is not None:
                    continue  # not a member yet
                if kind == "raft":
                    self.stats.received += 1
                    msg = body.get("msg")
                    if isinstance(msg, dict):
                        self.on_raft(peer, msg)
                elif kind == "snap" and joiner is None:
                    self._snapshot_chunk(peer, body.get("c"))
                elif kind == "req":
                    t = asyncio.create_task(self._answer(peer, body, session, writer, lock, joiner))
                    pending.add(t)
                    t.add_done_callback(pending.discard)
                else:
                    log.warning("peer %d sent unknown frame kind %r", peer, kind)
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            for t in pending:
                t.cancel()

    def _snapshot_chunk(self, peer: int, chunk: Any) -> None:
        """One chunk of a snapshot (nodeos/cluster/snapshot_stream.py); Raft gets it whole."""
        try:
            msg = self.snapshots.add(peer, chunk)
        except ValueError as exc:
            self.stats.bad_frames += 1
            log.warning("peer %d sent a snapshot chunk that was dropped: %s", peer, exc)
            return
        if msg is not None:
            self.stats.received += 1
            self.on_raft(peer, msg)

    async def _answer(
        self,
        peer: int,
        body: dict[str, Any],
        session: Session,
        writer: asyncio.StreamWriter,
        lock: asyncio.Lock,
        joiner: bytes | None = None,
    ) -> None:
        rid, method, params = body.get("id"), body.get("method"), body.get("params") or {}
        try:
            if not isinstance(method, str) or not isinstance(params, dict):
                raise BadInput("request needs a string 'method' and a map 'params'", field="method")
            params.pop("join_token_id", None)  # only the handshake says which token was used
            if joiner is not None:
                if method != "cluster.join":
                    raise BadInput("a joining node may only ask to join", field="method")
                params["join_token_id"] = joiner
            reply: dict[str, Any] = {
                "k": "rep",
                "id": rid,
                "result": await self.on_request(peer, method, params),
            }
        except NodeosError as err:
            reply = {"k": "rep", "id": rid, "error": err.to_dict()}
        except Exception as exc:  # a handler bug must not kill the connection silently
            log.exception("peer request %r failed", method)
            reply = {"k": "rep", "id": rid, "error": {"code": "failed", "message": f"internal error: {exc}"}}
        async with lock:
            with contextlib.suppress(Exception):
                writer.write(session.seal(reply))
                await writer.drain()
