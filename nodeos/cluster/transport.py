"""Peer transport: authenticated asyncio TCP between nodeosd daemons, in mutual TLS.

With TLS contexts (nodeos/cluster/tlsca.py: the cluster's own CA) every connection is TLS 1.3
and each side's certificate must name the node id it claims in the handshake below (a
joining node, which has no certificate yet, may only ask to join).

Frames use nodeos/rpc/framing.py (4-byte length + msgpack map).

Handshake (both sides prove the cluster secret; the secret never crosses the wire):
  dialer   -> {v, t: "hello", cluster, node, addr, nonce}
  acceptor -> {t: "challenge", node, nonce, proof: HMAC(secret, "acceptor" | transcript)}
  dialer   -> {t: "auth", proof: HMAC(secret, "dialer" | transcript)}
  acceptor -> {t: "welcome"}
`transcript` binds the cluster id, both node ids and both nonces, so a proof cannot be
replayed on another connection.

Secrets have generations (nodeos/cluster/secretroll.py): the hello names the one the dialer
proves (`gen`, absent for 0, bound into the transcript) and the acceptor checks it against its
secret of that generation; during a roll it accepts two. A generation rotated away is refused
with a clear error, and connections made with it are closed once it is dropped. A dialer hands
its connections over to its new generation as soon as it dials with it: new traffic takes a
new connection, the old one only carries the replies still owed on it (peersender.py). A CA
roll (nodeos/cluster/carotation.py) changes the TLS contexts the same way (`set_tls`: a new
`tls_epoch`); an acceptor closes a session whose peer certificate's CA it no longer trusts.

A node joining with a join token (nodeos/cluster/token.py) does not know the cluster secret:
its hello carries `join: token id`, both sides prove the token's key instead (the id is bound
into the transcript), and that connection may only ask `cluster.join` (the handler gets the
token id as `join_token_id`); its Raft messages are dropped. Before authentication frames are
limited to a few KiB.

After the handshake every frame is `{s: seq, b: body, m: mac}` where `mac` is
HMAC-SHA256 over (seq, body) with a per-direction session key derived from the secret
and both nonces; `seq` must increase by one (no replay, no reordering, no injection).

Connections are opened by the sender. On one connection the dialer sends Raft messages
(`{k: "raft", msg}`) and requests (`{k: "req", id, method, params}`); the acceptor answers
requests (`{k: "rep", id, result|error}`) on the same connection.

Bad input from a peer (malformed frame, oversized frame, wrong version, wrong cluster,
bad proof, bad MAC) is answered with `{t: "error", error: {code, message}}` when possible,
logged without secrets, and the connection is closed; the server keeps serving.

Anyone can connect to the peer port, so what a stranger can cost is bounded, counted from the
moment a connection is accepted (before TLS, which this side runs itself: peerserver.py): at
most MAX_PENDING_PER_SOURCE unauthenticated connections per source address and
MAX_HANDSHAKING in all (a new one evicts the oldest: a real peer's handshake takes a round
trip, a stranger's silence cannot keep it out), and MAX_INBOUND inbound connections in all
(more are closed at once, unanswered). TLS must complete within TLS_HANDSHAKE_TIMEOUT and the
peer handshake within HANDSHAKE_TIMEOUT; a connection that fails either is aborted at once,
and a TLS close waits at most TLS_SHUTDOWN_TIMEOUT for the peer's close_notify. Log lines a
stranger can cause are rate limited (LOG_BURST per LOG_WINDOW_S, then a count of those dropped).

A Raft snapshot larger than one chunk (1 MiB, less under a small frame limit) goes as
`{k: "snap", c: chunk}` frames and is put together and checked (SHA-256) by the receiver before
it reaches Raft (nodeos/cluster/snapshot_stream.py): a 100,000-volume map is over the frame limit.

Slow peers never stall the leader: `send_raft` is synchronous and only appends to that
peer's bounded queue, dropping the oldest Raft message when full (Raft retransmits).
Each peer has its own sender task that reconnects with capped exponential backoff.

The outbound side is in peersender.py, the inbound one (listener, acceptor's handshake, serving a
connection) in peerserver.py; shared limits and helpers in peerwire.py, the proofs in peerauth.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeos.cluster.errors import PeerUnreachable, remote_error
from nodeos.cluster.peerauth import NONCE_BYTES, Session, mac, session_keys, transcript
from nodeos.cluster.peersender import _PeerSender
from nodeos.cluster.peerserver import PeerServer, RaftHandler, RequestHandler
from nodeos.cluster.peerwire import (
    HANDSHAKE_MAX_FRAME,
    HANDSHAKE_TIMEOUT,
    LOG_BURST,
    LOG_WINDOW_S,
    MAX_HANDSHAKING,
    MAX_INBOUND,
    MAX_PENDING_PER_SOURCE,
    RateLimitedLog,
    _close,
    parse_address,
)
from nodeos.cluster.snapshot_stream import CHUNK_BYTES, Assembler, needs_chunks, split
from nodeos.cluster.tlsca import node_cn, peer_cn
from nodeos.errors import BadInput, OperationFailed
from nodeos.rpc.framing import DEFAULT_MAX_FRAME, PROTOCOL_VERSION, pack, read_frame

log = logging.getLogger(__name__)
__all__ = [  # the limits live in peerwire; named here too, where readers of the transport look
    "LOG_BURST",
    "LOG_WINDOW_S",
    "MAX_HANDSHAKING",
    "MAX_INBOUND",
    "MAX_PENDING_PER_SOURCE",
    "PeerTransport",
    "RateLimitedLog",
    "parse_address",
]


@dataclass
class TransportStats:
    dropped: int = 0  # raft messages dropped from full queues
    refused: int = 0  # connections refused at handshake (auth, version, cluster)
    shed: int = 0  # connections closed unanswered: too many handshaking or inbound already
    over_source_cap: int = 0  # of those, refused unread: their address had MAX_PENDING_PER_SOURCE
    bad_frames: int = 0  # authenticated connections closed on a bad frame
    sent: int = 0
    received: int = 0
    snapshot_chunks_sent: int = 0
    per_peer_dropped: dict[int, int] = field(default_factory=dict)


class PeerTransport(PeerServer):
    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        secret: bytes,
        on_raft: RaftHandler,
        on_request: RequestHandler,
        *,
        advertise: str = "",
        queue_limit: int = 4096,
        max_frame: int = DEFAULT_MAX_FRAME,
        join_id: bytes | None = None,
        token_key: Callable[[bytes], bytes | None] | None = None,
        tls_server: ssl.SSLContext | None = None,
        tls_client: ssl.SSLContext | None = None,
        secret_gen: int = 0,
        accepted: dict[int, bytes] | None = None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._secret = secret  # the cluster secret, or a join token's key when join_id is set
        self.secret_gen = secret_gen  # the generation of the secret this node dials with
        self._accepted = dict(accepted or {secret_gen: secret})  # generations an acceptor takes
        self.rotated_away: str | None = None  # why a peer refused our secret as rotated away, if one did
        self.join_id = join_id  # dialer side: authenticate with this join token
        self.token_key = token_key  # acceptor side: a live join token's key by id, else None
        self.tls_server = tls_server
        self.tls_client = tls_client
        self._tls_current = tls_server  # what new inbound connections get (a CA roll changes it)
        self.tls_epoch = 0  # bumped at each change of this node's TLS identity or trust
        self.trusted_cas: set[str] | None = None  # set by a CA roll: issuers a peer's certificate may have
        self.on_raft = on_raft
        self.on_request = on_request
        self.advertise = advertise
        self.queue_limit = queue_limit
        self.max_frame = max_frame
        self.chunk_bytes = min(CHUNK_BYTES, max_frame // 2)  # a chunk and its frame's envelope fit
        self.snapshots = Assembler()  # snapshot chunks received, per sender (snapshot_stream.py)
        self.stats = TransportStats()
        self._peers: dict[int, _PeerSender] = {}
        self._server: asyncio.Server | None = None
        self._inbound: set[asyncio.Task[None]] = set()
        # Connections not yet authenticated: their task -> (source address, raw transport).
        self._handshaking: dict[asyncio.Task[None], tuple[str, asyncio.Transport]] = {}  # oldest first
        self._stranger_log = RateLimitedLog(log)  # what unauthenticated connections cause
        # Test-only fault injection (enabled by the service only under NODEOS_TEST_FAULTS=1):
        # traffic to and from these peers is silently dropped, as if the link were cut.
        self.blocked: set[int] = set()

    def set_keys(self, dial_gen: int, secrets: dict[int, bytes]) -> None:
        """Dial with `dial_gen` from now on and accept exactly `secrets` (a roll's step)."""
        self._secret, self.secret_gen, self._accepted = secrets[dial_gen], dial_gen, dict(secrets)
        for sender in self._peers.values():
            sender.wake.set()  # a connection of an older generation hands over now

    def set_tls(self, server: ssl.SSLContext, client: ssl.SSLContext, trusted_cas: set[str]) -> None:
        """New TLS contexts (a CA roll's step): new connections use them, old ones hand over."""
        self._tls_current, self.tls_client, self.trusted_cas = server, client, set(trusted_cas)
        self.tls_epoch += 1
        for sender in self._peers.values():
            sender.wake.set()

    def old_connections(self) -> int:
        """Outbound connections made with an older secret generation or TLS identity than now."""
        return sum(
            1
            for s in self._peers.values()
            if s.connected and (s.session_gen != self.secret_gen or s.session_epoch != self.tls_epoch)
        )

    # --- client side ---
    def set_peer(self, node_id: int, address: str) -> None:
        if node_id == self.node_id:
            return
        cur = self._peers.get(node_id)
        if cur is not None:
            if cur.address == address:
                return
            cur.stop()
        self._peers[node_id] = _PeerSender(self, node_id, address)

    def remove_peer(self, node_id: int) -> None:
        sender = self._peers.pop(node_id, None)
        if sender is not None:
            sender.stop()

    def peers(self) -> dict[int, str]:
        return {nid: s.address for nid, s in self._peers.items()}

    def send_raft(self, to: int, msg: dict[str, Any]) -> bool:
        """Queue a Raft message; never blocks. False if the peer is unknown. A snapshot larger
        than one chunk goes as chunks (nodeos/cluster/snapshot_stream.py)."""
        sender = self._peers.get(to)
        if sender is None or to in self.blocked:
            return False
        if needs_chunks(msg, self.chunk_bytes):
            chunks = split(msg, self.chunk_bytes)
            self.stats.snapshot_chunks_sent += len(chunks)
            for c in chunks:
                sender.enqueue({"k": "snap", "c": c})
            return True
        sender.enqueue(msg)
        return True

    async def request(self, to: int, method: str, params: dict[str, Any], timeout: float = 5.0) -> Any:
        sender = self._peers.get(to)
        if sender is None:
            raise PeerUnreachable(f"node {to} is not a known peer")
        if to in self.blocked:
            await asyncio.sleep(timeout)  # a cut link looks like silence, not a refusal
            raise PeerUnreachable(f"no answer from node {to} within {timeout} s (link cut by a test fault)")
        return await sender.request(method, params, timeout)

    async def request_address(
        self, address: str, method: str, params: dict[str, Any], timeout: float = 5.0
    ) -> Any:
        """A one-off request to an address that is not (yet) a peer, e.g. `join`."""
        sender = _PeerSender(self, 0, address, one_shot=True)
        try:
            return await sender.request(method, params, timeout)
        finally:
            sender.stop()

    async def close(self) -> None:
        for sender in list(self._peers.values()):
            sender.stop()
        self._peers.clear()
        if self._server is not None:
            self._server.close()
            for t in list(self._inbound):
                t.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def dial(
        self, address: str, expect_node: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Session, int]:
        host, port = parse_address(address)
        tls_client, epoch = self.tls_client, self.tls_epoch
        try:
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=tls_client,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT if tls_client else None,
            )
        except ssl.SSLCertVerificationError:
            # Its certificate is not from our cluster CA: another cluster (or an impostor).
            raise BadInput(f"{address} has no certificate of this cluster", field="cluster") from None
        secret, gen = self._secret, (0 if self.join_id else self.secret_gen)
        try:
            mine = os.urandom(NONCE_BYTES)
            writer.write(
                pack(
                    {
                        "v": PROTOCOL_VERSION,
                        "t": "hello",
                        "cluster": self.cluster_id,
                        "node": self.node_id,
                        "addr": self.advertise,
                        "nonce": mine,
                        **({"join": self.join_id} if self.join_id else {}),
                        **({"gen": gen} if gen else {}),
                    }
                )
            )
            await writer.drain()
            chal = await read_frame(reader, HANDSHAKE_MAX_FRAME)
            if chal is None:
                raise OperationFailed(f"{address} closed the connection during the handshake")
            if chal.get("t") == "error":
                err = remote_error(chal.get("error") or {})
                if err.field == "secret" and not self.join_id:
                    self.rotated_away = f"node {expect_node or '?'} at {address}: {err.message}"
                raise err
            node, nonce, proof = chal.get("node"), chal.get("nonce"), chal.get("proof")
            if type(node) is not int or not isinstance(nonce, bytes) or not isinstance(proof, bytes):
                raise OperationFailed(f"{address} sent a malformed challenge")
            if expect_node and node != expect_node:
                raise OperationFailed(f"{address} is node {node}, expected node {expect_node}")
            if self.tls_client is not None:
                cn = peer_cn(writer.get_extra_info("peercert"))
                if cn != node_cn(node):
                    raise OperationFailed(f"{address} claims node {node} but its certificate is for {cn}")
            tr = transcript(self.cluster_id, self.node_id, node, mine, nonce) + (
                [self.join_id] if self.join_id else []
            )
            tr += [str(gen).encode()] if gen else []
            if not hmac.compare_digest(proof, mac(secret, b"acceptor", *tr)):
                if self.join_id:
                    # The member knows this token id (it answered with a proof) but its key is not
                    # the one we hold: the token was altered or belongs to another cluster. Bad
                    # input from the operator, not a fault of the peer.
                    raise BadInput("the token is not valid for this cluster", field="token")
                raise OperationFailed(f"{address} did not prove the cluster secret")
            writer.write(pack({"t": "auth", "proof": mac(secret, b"dialer", *tr)}))
            await writer.drain()
            welcome = await read_frame(reader, HANDSHAKE_MAX_FRAME)
            if welcome is None or welcome.get("t") != "welcome":
                err = (welcome or {}).get("error") or {"message": f"{address} refused the handshake"}
                raise remote_error(err)
            session = session_keys(secret, mine, nonce, dialer=True)
            session.gen, session.epoch = gen, epoch
            self.rotated_away = None
            return reader, writer, session, node
        except BaseException:
            await _close(writer)
            raise
