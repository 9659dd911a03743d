"""The outbound side of the peer transport: one connection per peer, a bounded Raft queue,
requests and replies, reconnects with capped exponential backoff."""

from __future__ import annotations

import asyncio
import collections
import itertools
import random
from typing import TYPE_CHECKING, Any

import msgpack

from nodeos.cluster.errors import PeerUnreachable, remote_error
from nodeos.cluster.peerauth import Session
from nodeos.cluster.peerwire import HANDSHAKE_TIMEOUT, _close
from nodeos.errors import BadInput, NodeosError, OperationFailed
from nodeos.rpc.framing import read_frame

if TYPE_CHECKING:
    from nodeos.cluster.transport import PeerTransport

WRITE_BUDGET = 4 << 20  # bytes of frames per write: a snapshot's chunks go a few at a time


class _PeerSender:
    """One outbound connection to one peer: bounded Raft queue, requests, reconnects."""

    BACKOFF_MIN = 0.05
    BACKOFF_MAX = 2.0

    def __init__(self, t: PeerTransport, node_id: int, address: str, one_shot: bool = False) -> None:
        self.t = t
        self.node_id = node_id
        self.address = address
        self.one_shot = one_shot
        self.queue: collections.deque[dict[str, Any]] = collections.deque()
        self.requests: collections.deque[dict[str, Any]] = collections.deque()
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.wake = asyncio.Event()
        self.ids = itertools.count(1)
        self.connected = False
        self.session_gen = 0  # the secret generation of the current connection
        self.session_epoch = 0  # the TLS identity (PeerTransport.tls_epoch) of the current connection
        self.draining: set[asyncio.Task[None]] = set()  # older connections finishing their replies
        self.last_error = ""
        self.task = asyncio.get_running_loop().create_task(self._run())

    def enqueue(self, msg: dict[str, Any]) -> None:
        if len(self.queue) >= self.t.queue_limit:
            self.queue.popleft()
            self.t.stats.dropped += 1
            self.t.stats.per_peer_dropped[self.node_id] = (
                self.t.stats.per_peer_dropped.get(self.node_id, 0) + 1
            )
        self.queue.append(msg)
        self.wake.set()

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        try:  # packed once here too: a request that cannot be framed fails alone, before it is
            # queued, instead of breaking the frame writer and with it the connection (Raft's too)
            msgpack.packb(params, use_bin_type=True)
        except (OverflowError, TypeError, ValueError) as exc:
            raise BadInput(
                f"{method}: a parameter cannot be sent to another member: {exc}", field="params"
            ) from None
        rid = next(self.ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        self.requests.append({"k": "req", "id": rid, "method": method, "params": params})
        self.wake.set()
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            detail = f" ({self.last_error})" if self.last_error else ""
            raise PeerUnreachable(f"no answer from {self.address} within {timeout} s{detail}") from None
        finally:
            self.waiting.pop(rid, None)

    def stop(self) -> None:
        self.task.cancel()
        for t in self.draining:
            t.cancel()
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(PeerUnreachable(f"connection to {self.address} closed"))

    async def _run(self) -> None:
        backoff = self.BACKOFF_MIN
        while True:
            try:
                reader, writer, session, _ = await asyncio.wait_for(
                    self.t.dial(self.address, self.node_id), HANDSHAKE_TIMEOUT
                )
            except asyncio.CancelledError:
                raise
            except NodeosError as err:
                self.last_error = err.message
                if self.one_shot:
                    self._fail_waiting(err)
                    return
            except Exception as exc:
                self.last_error = f"{exc.__class__.__name__}: {exc}"
                if self.one_shot:
                    self._fail_waiting(PeerUnreachable(f"cannot reach {self.address}: {self.last_error}"))
                    return
            else:
                backoff = self.BACKOFF_MIN
                self.connected = True
                self.session_gen = session.gen
                self.session_epoch = session.epoch
                self.last_error = ""
                handed_over = False
                try:
                    handed_over = await self._pump(reader, writer, session)
                except asyncio.CancelledError:
                    await _close(writer)
                    raise
                except Exception as exc:
                    self.last_error = f"{exc.__class__.__name__}: {exc}"
                finally:
                    self.connected = False
                    if not handed_over:
                        await _close(writer)
                if handed_over:
                    continue  # a secret roll: the new connection now, the old one drains its replies
                # Requests in flight on a dead connection have an unknown outcome.
                self._fail_waiting(PeerUnreachable(f"connection to {self.address} lost: {self.last_error}"))
            await asyncio.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, self.BACKOFF_MAX)

    def _fail_waiting(self, err: NodeosError) -> None:
        self.requests.clear()
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(err)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session: Session
    ) -> bool:
        """Send until the connection ends (False) or is handed over to a new one (True)."""
        replies = asyncio.create_task(self._read_replies(reader, session))
        handed_over = False
        try:
            while True:
                if replies.done():
                    replies.result()  # re-raise why the connection ended
                    return False
                if session.gen != self.t.secret_gen or session.epoch != self.t.tls_epoch:
                    # A secret or CA roll: new requests and Raft messages go on a connection of the new
                    # generation; this one only takes the replies still owed on it, then closes.
                    owed = [f for f in self.waiting.values() if not f.done()]
                    drain = asyncio.create_task(self._drain(replies, writer, owed))
                    self.draining.add(drain)
                    drain.add_done_callback(self.draining.discard)
                    handed_over = True
                    return True
                if not self.queue and not self.requests:
                    self.wake.clear()
                    waiter = asyncio.create_task(self.wake.wait())
                    try:
                        await asyncio.wait({waiter, replies}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                    continue
                # Requests first: a client waits on them; Raft messages are retransmitted anyway.
                # One write for all: one TLS record and one system call, not one per message.
                frames = [session.seal(self.requests.popleft()) for _ in range(len(self.requests))]
                batch, size = 0, 0
                while self.queue and batch < 256 and size < WRITE_BUDGET:
                    m = self.queue.popleft()  # a snapshot's chunk is its own frame kind (snapshot_stream)
                    frames.append(session.seal(m if m.get("k") == "snap" else {"k": "raft", "msg": m}))
                    batch, size = batch + 1, size + len(frames[-1])
                writer.write(b"".join(frames))
                self.t.stats.sent += batch
                await writer.drain()
        finally:
            if not handed_over:
                replies.cancel()

    async def _drain(
        self, replies: asyncio.Task[None], writer: asyncio.StreamWriter, owed: list[asyncio.Future[Any]]
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 300.0
        try:
            while not replies.done() and loop.time() < deadline:
                left = [f for f in owed if not f.done()]
                if not left:
                    return
                await asyncio.wait(
                    [replies, *left], timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED
                )
            for f in owed:
                if not f.done():  # the old connection died first: those outcomes are unknown
                    f.set_exception(PeerUnreachable(f"connection to {self.address} lost in a secret roll"))
        finally:
            replies.cancel()
            await _close(writer)

    async def _read_replies(self, reader: asyncio.StreamReader, session: Session) -> None:
        while True:
            frame = await read_frame(reader, self.t.max_frame)
            if frame is None:
                raise ConnectionResetError("peer closed the connection")
            if frame.get("t") == "error":
                raise OperationFailed(
                    f"peer closed the connection: {(frame.get('error') or {}).get('message')}"
                )
            body = session.open(frame)
            if body.get("k") == "rep":
                fut = self.waiting.get(body.get("id"))  # type: ignore[arg-type]
                if fut is not None and not fut.done():
                    if "error" in body:
                        fut.set_exception(remote_error(body["error"] or {}))
                    else:
                        fut.set_result(body.get("result"))
