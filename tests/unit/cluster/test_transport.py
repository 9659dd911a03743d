"""Peer transport on real loopback sockets: auth, bad frames, reconnect, bounded queues."""

from __future__ import annotations

import asyncio
import hmac
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest

from nodeos.cluster import peerauth
from nodeos.cluster.transport import PeerTransport
from nodeos.errors import BadInput, NodeosError, OperationFailed
from nodeos.rpc.framing import PROTOCOL_VERSION, pack, read_frame

SECRET = b"s" * 32
CLUSTER = "c-test"

pytestmark = pytest.mark.timeout(60)


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro_fn())


class Node:
    def __init__(self, node_id: int, secret: bytes = SECRET, cluster: str = CLUSTER, **kw: Any) -> None:
        self.got: list[tuple[int, dict[str, Any]]] = []
        self.arrived = asyncio.Event()
        self.t = PeerTransport(node_id, cluster, secret, self._on_raft, self._on_request, **kw)

    def _on_raft(self, frm: int, msg: dict[str, Any]) -> None:
        self.got.append((frm, msg))
        self.arrived.set()

    async def _on_request(self, frm: int, method: str, params: dict[str, Any]) -> Any:
        if method == "echo":
            return {"from": frm, "params": params}
        raise BadInput(f"unknown method {method}", field="method")

    async def wait_for(self, n: int, timeout: float = 10) -> None:
        async def _poll() -> None:
            while len(self.got) < n:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(_poll(), timeout)


async def started(node_id: int, port: int = 0, **kw: Any) -> Node:
    n = Node(node_id, **kw)
    await n.t.listen("127.0.0.1", port)
    return n


def test_messages_and_requests_flow_between_authenticated_peers() -> None:
    async def main() -> None:
        a, b = await started(1), await started(2)
        a.t.set_peer(2, b.t.advertise)
        for i in range(50):
            assert a.t.send_raft(2, {"i": i})
        await b.wait_for(50)
        assert [m["i"] for _, m in b.got] == list(range(50)) and {f for f, _ in b.got} == {1}
        assert await a.t.request(2, "echo", {"x": 1}) == {"from": 1, "params": {"x": 1}}
        with pytest.raises(BadInput) as exc:
            await a.t.request(2, "nope", {})
        assert exc.value.field == "method"
        await a.t.close()
        await b.t.close()

    run(main)


@pytest.mark.parametrize("who_is_wrong", ["dialer", "acceptor"])
def test_wrong_secret_is_refused_both_ways(who_is_wrong: str) -> None:
    async def main() -> None:
        bad = b"x" * 32
        a = await started(1, secret=bad if who_is_wrong == "dialer" else SECRET)
        b = await started(2, secret=bad if who_is_wrong == "acceptor" else SECRET)
        with pytest.raises(NodeosError, match="cluster secret"):
            await a.t.request_address(b.t.advertise, "echo", {}, timeout=5)
        a.t.set_peer(2, b.t.advertise)
        a.t.send_raft(2, {"i": 1})
        # Let the sender try (and fail) a few times, then check nothing was delivered.
        for _ in range(50):
            if b.t.stats.refused >= 2 or (who_is_wrong == "acceptor" and a.t._peers[2].last_error):
                break
            await asyncio.sleep(0.02)
        assert b.got == []
        await a.t.close()
        await b.t.close()

    run(main)


async def raw_exchange(addr: str, payload: bytes) -> tuple[dict[str, Any] | None, bool]:
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(payload)
    await writer.drain()
    reply = await asyncio.wait_for(read_frame(reader), 5)
    closed = await asyncio.wait_for(reader.read(1), 5) == b""
    writer.close()
    return reply, closed


def hello(**over: Any) -> bytes:
    h = {"v": PROTOCOL_VERSION, "t": "hello", "cluster": CLUSTER, "node": 9, "addr": "", "nonce": b"n" * 32}
    h.update(over)
    return pack(h)


@pytest.mark.parametrize(
    ("payload", "code", "words"),
    [
        (struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1", "bad_frame", "msgpack"),
        (struct.pack(">I", 3) + msgpack.packb([1, 2]), "bad_frame", "map"),
        (struct.pack(">I", 50_000_000) + b"x" * 100, "too_large", "exceeds"),
        (hello(v=99), "bad_version", "version"),
        (hello(cluster="someone-else"), "bad_input", "cluster"),
        (hello(nonce=b"short"), "bad_frame", "nonce"),
    ],
)
def test_bad_frames_get_an_error_and_close_and_the_server_lives_on(
    payload: bytes, code: str, words: str
) -> None:
    async def main() -> None:
        a, b = await started(1), await started(2)
        reply, closed = await raw_exchange(b.t.advertise, payload)
        assert reply is not None and reply["t"] == "error"
        assert reply["error"]["code"] == code and words in reply["error"]["message"]
        assert closed
        # The server still serves a well-behaved peer.
        assert (await a.t.request_address(b.t.advertise, "echo", {"ok": True}))["params"] == {"ok": True}
        await a.t.close()
        await b.t.close()

    run(main)


def test_tampered_frame_after_handshake_is_refused() -> None:
    async def main() -> None:
        a, b = await started(1), await started(2)
        reader, writer, session, node = await a.t.dial(b.t.advertise, 2)
        assert node == 2
        good = session.seal({"k": "raft", "msg": {"i": 1}})
        forged = bytearray(session.seal({"k": "raft", "msg": {"i": 2}}))
        forged[-1] ^= 1  # flip a bit of the MAC
        writer.write(good + bytes(forged))
        await writer.drain()
        reply = await asyncio.wait_for(read_frame(reader), 5)
        assert reply is not None and reply["error"]["code"] == "bad_auth"
        assert [m for _, m in b.got] == [{"i": 1}]
        writer.close()
        await a.t.close()
        await b.t.close()

    run(main)


@pytest.mark.parametrize("key_len", [0, 20, 32, 64, 65, 131])
def test_a_frames_mac_is_standard_hmac_sha256_of_its_parts(key_len: int) -> None:
    """Frames are MACed with the padded key states hashed once per session; that must be
    HMAC-SHA256 (RFC 2104) exactly, or peers of another build would refuse every frame."""
    key = bytes(range(key_len))
    parts = (b"\x00" * 8, b"Hi There" * 300)
    framed = b"".join(struct.pack(">Q", len(p)) + p for p in parts)
    assert peerauth._Hmac(key)(*parts) == hmac.digest(key, framed, "sha256") == peerauth.mac(key, *parts)


def test_reconnects_after_the_peer_restarts() -> None:
    async def main() -> None:
        a, b = await started(1), await started(2)
        port = int(b.t.advertise.rsplit(":", 1)[1])
        a.t.set_peer(2, b.t.advertise)
        a.t.send_raft(2, {"i": 0})
        await b.wait_for(1)
        await b.t.close()
        b2 = await started(2, port=port)
        a.t.send_raft(2, {"i": 1})
        # Raft retransmits; emulate that until the restarted peer hears us.
        for i in range(2, 400):
            if b2.got:
                break
            a.t.send_raft(2, {"i": i})
            await asyncio.sleep(0.025)
        await b2.wait_for(1)
        assert b2.got[0][0] == 1
        await a.t.close()
        await b2.t.close()

    run(main)


def test_a_stalled_peer_does_not_stall_the_others_and_its_queue_is_bounded() -> None:
    async def main() -> None:
        # A "peer" that accepts connections and never reads or answers.
        async def black_hole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(3600)

        server = await asyncio.start_server(black_hole, "127.0.0.1", 0)
        hole = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        a = await started(1, queue_limit=100)
        c = await started(3)
        a.t.set_peer(2, hole)
        a.t.set_peer(3, c.t.advertise)
        for batch in range(10):
            for i in range(batch * 50, batch * 50 + 50):
                a.t.send_raft(2, {"i": i, "pad": b"x" * 1000})
                a.t.send_raft(3, {"i": i})
            await c.wait_for(batch * 50 + 50)
        assert [m["i"] for _, m in c.got] == list(range(500))
        assert len(a.t._peers[2].queue) == 100
        assert a.t.stats.per_peer_dropped[2] == 400 and 3 not in a.t.stats.per_peer_dropped
        # The queue keeps the newest messages.
        assert a.t._peers[2].queue[-1]["i"] == 499
        with pytest.raises(OperationFailed):
            await a.t.request(2, "echo", {}, timeout=0.5)
        server.close()
        await a.t.close()
        await c.t.close()

    run(main)


def test_join_to_a_non_existent_cluster_address_is_a_clear_error() -> None:
    async def main() -> None:
        a = await started(1)
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(OperationFailed, match="cannot reach"):
            await a.t.request_address(f"127.0.0.1:{port}", "echo", {}, timeout=5)
        await a.t.close()

    run(main)


def test_a_flood_of_silent_connections_is_bounded_and_quietly_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from nodeos.cluster import transport as tmod

    async def main() -> None:
        a, b = await started(1), await started(2)
        host, port = b.t.advertise.rsplit(":", 1)
        caplog.set_level("INFO", logger="nodeos.cluster.transport")
        # From an address of its own (all of 127/8 is loopback): the cap is per source address.
        flood = [
            await asyncio.open_connection(host, int(port), local_addr=("127.0.0.5", 0)) for _ in range(200)
        ]

        # Each silent connection is either held in its handshake (at most the per-address cap)
        # or refused at once.
        async def closed_by_server(r: asyncio.StreamReader) -> bool:
            try:
                return await asyncio.wait_for(r.read(1), 0.5) == b""
            except ConnectionError:  # reset by the server
                return True
            except TimeoutError:
                return False

        shut = sum(await asyncio.gather(*(closed_by_server(r) for r, _ in flood)))
        # A stranger may hold at most a few connections (each costs an fd, a task and a TLS buffer).
        cap = tmod.MAX_PENDING_PER_SOURCE
        # Closed unread (shed), or, on a loaded host where a held one's 5 s handshake ran out
        # meanwhile, refused at its handshake: either way closed by the server.
        st = b.t.stats
        assert shut >= 200 - cap and st.shed + st.refused >= 200 - cap, (shut, st)
        # The node still serves its real peers meanwhile.
        a.t.set_peer(2, b.t.advertise)
        assert await a.t.request(2, "echo", {"x": 1}) == {"from": 1, "params": {"x": 1}}
        lines = [r for r in caplog.records if r.name == "nodeos.cluster.transport"]
        assert len(lines) <= tmod.LOG_BURST + 1, [r.getMessage() for r in lines]
        for _, w in flood:
            w.close()
        await a.t.close()
        await b.t.close()

    run(main)


def test_strangers_from_many_addresses_cannot_keep_a_real_peer_out() -> None:
    """The per-address cap does not bound many addresses: the total one does, oldest out."""
    from nodeos.cluster import transport as tmod

    async def main() -> None:
        a, b = await started(1), await started(2)
        host, port = b.t.advertise.rsplit(":", 1)
        flood = [
            await asyncio.open_connection(host, int(port), local_addr=(f"127.0.1.{i % 40 + 1}", 0))
            for i in range(160)
        ]
        await asyncio.sleep(0.2)
        assert len(b.t._handshaking) <= tmod.MAX_HANDSHAKING
        assert b.t.stats.shed >= 160 - tmod.MAX_HANDSHAKING, b.t.stats
        a.t.set_peer(2, b.t.advertise)
        assert await a.t.request(2, "echo", {"x": 1}) == {"from": 1, "params": {"x": 1}}
        for _, w in flood:
            w.close()
        await a.t.close()
        await b.t.close()

    run(main)


def test_rate_limited_log_says_how_many_lines_it_dropped(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from nodeos.cluster.transport import RateLimitedLog

    logger = logging.getLogger("test.ratelimit")
    caplog.set_level("INFO", logger="test.ratelimit")
    rl = RateLimitedLog(logger, burst=3, window=0.0)  # window 0: every line opens a new window
    rl.window = 3600.0
    for i in range(50):
        rl.log(logging.WARNING, "junk %d", i)
    assert [r.getMessage() for r in caplog.records] == ["junk 0", "junk 1", "junk 2"]
    assert rl.suppressed == 47
    rl.window = 0.0
    rl.log(logging.WARNING, "next")
    assert [r.getMessage() for r in caplog.records][-2:] == [
        "47 similar peer-port messages suppressed",
        "next",
    ]


def test_a_request_that_cannot_be_framed_fails_alone_and_the_connection_stays() -> None:
    """Issue 26's fuzzing: an integer wider than 64 bits in a forwarded request broke the frame
    writer, dropping the member's connection to the leader (Raft's messages too)."""

    async def main() -> None:
        a, b = await started(1), await started(2)
        a.t.set_peer(2, b.t.advertise)
        assert await a.t.request(2, "echo", {"x": 1}) == {"from": 1, "params": {"x": 1}}
        dropped = a.t.stats.dropped
        with pytest.raises(BadInput) as exc:
            await a.t.request(2, "echo", {"x": 2**70}, timeout=5)
        assert exc.value.field == "params"
        assert a.t.send_raft(2, {"i": 1})
        await b.wait_for(1)
        assert await a.t.request(2, "echo", {"x": 3}) == {"from": 1, "params": {"x": 3}}
        assert a.t.stats.dropped == dropped
        await a.t.close()
        await b.t.close()

    run(main)
