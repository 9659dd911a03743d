"""A snapshot sent in chunks (nodeos/cluster/snapshot_stream.py): split, put together in any
order, a lost chunk completed by a retry, a damaged one refused; and on real loopback sockets
a snapshot four times the frame limit arrives whole."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest

from nodeos.cluster.snapshot_stream import Assembler, needs_chunks, split
from nodeos.cluster.transport import PeerTransport

pytestmark = pytest.mark.timeout(60)


def snap_msg(data: bytes, term: int = 2) -> dict[str, Any]:
    conf = {"voters": [1, 2, 3], "learners": [4]}
    return {"type": 7, "to": 4, "from": 1, "term": term, "log_term": 0, "index": 0, "commit": 90,
            "snapshot": {"index": 90, "term": 2, "conf": conf, "data": data}}  # fmt: skip


def test_only_a_snapshot_larger_than_a_chunk_is_chunked() -> None:
    assert not needs_chunks({"type": 3, "to": 2, "from": 1}, 10)
    assert not needs_chunks(snap_msg(b"x" * 10), 10)
    assert needs_chunks(snap_msg(b"x" * 11), 10)


def test_chunks_in_any_order_give_the_message_back_whole() -> None:
    msg = snap_msg(os.urandom(10_000))
    chunks = split(msg, 1024)
    assert len(chunks) == 10 and all(len(c["data"]) <= 1024 for c in chunks)
    assert all(c["head"]["snapshot"]["data"] == b"" for c in chunks)
    random.Random(7).shuffle(chunks)
    a = Assembler()
    outs = [a.add(1, c) for c in chunks]
    assert outs[:-1] == [None] * 9 and outs[-1] == msg
    assert a.pending(1) is None and a.stats.completed == 1


def test_a_lost_chunk_is_completed_by_the_retry_and_duplicates_are_ignored() -> None:
    msg = snap_msg(os.urandom(5000))
    a = Assembler()
    first = split(msg, 1000)
    for c in first[:2] + first[3:]:  # chunk 2 lost
        assert a.add(4, c) is None
    assert a.pending(4) == (4, 5)
    retry = split(snap_msg(msg["snapshot"]["data"], term=3), 1000)  # the leader sends it again
    assert a.add(4, retry[0]) is None and a.stats.duplicates == 1  # kept from the first attempt
    out = a.add(4, retry[2])
    assert out is not None and out["snapshot"]["data"] == msg["snapshot"]["data"]
    assert out["term"] == 3  # the latest attempt's head


def test_a_newer_snapshot_from_the_same_sender_replaces_the_partial_one() -> None:
    a = Assembler()
    old, new = split(snap_msg(b"a" * 3000), 1000), split(snap_msg(b"b" * 2000), 1000)
    a.add(1, old[0])
    a.add(2, old[1])  # another sender's snapshot is its own
    a.add(1, new[0])
    assert a.stats.superseded == 1 and a.pending(1) == (1, 2) and a.pending(2) == (1, 3)
    out = a.add(1, new[1])
    assert out is not None and out["snapshot"]["data"] == b"b" * 2000


def test_a_damaged_chunk_fails_the_checksum_and_nothing_reaches_raft() -> None:
    a = Assembler()
    chunks = split(snap_msg(b"z" * 3000), 1000)
    chunks[1] = {**chunks[1], "data": b"y" * 1000}
    a.add(1, chunks[0])
    a.add(1, chunks[1])
    with pytest.raises(ValueError, match="checksum"):
        a.add(1, chunks[2])
    assert a.pending(1) is None and a.stats.bad == 1


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"id": b"short"}, "id"),
        ({"seq": 5}, "out of range"),
        ({"n": -1}, "n"),
        ({"size": 1 << 40}, "limit"),
        ({"head": {"type": 7}}, "head"),
        ({"data": "text"}, "data"),
    ],
)
def test_malformed_chunks_are_refused_by_name(change: dict[str, Any], why: str) -> None:
    chunk = {**split(snap_msg(b"q" * 3000), 1000)[0], **change}
    with pytest.raises(ValueError, match=why):
        Assembler().add(1, chunk)


def test_chunks_holding_more_than_the_size_are_refused() -> None:
    a = Assembler()
    chunks = split(snap_msg(b"q" * 2500), 1000)
    a.add(1, {**chunks[0], "data": b"q" * 2000})
    with pytest.raises(ValueError, match="more than its size"):
        a.add(1, {**chunks[1], "data": b"q" * 1000})


def test_a_snapshot_four_times_the_frame_limit_crosses_real_sockets() -> None:
    async def main() -> None:
        got: list[tuple[int, dict[str, Any]]] = []
        arrived = asyncio.Event()

        def on_raft(frm: int, msg: dict[str, Any]) -> None:
            got.append((frm, msg))
            arrived.set()

        async def on_request(frm: int, method: str, params: dict[str, Any]) -> Any:
            return None

        limit = 64 * 1024
        a = PeerTransport(1, "c", b"s" * 32, on_raft, on_request, max_frame=limit)
        b = PeerTransport(2, "c", b"s" * 32, on_raft, on_request, max_frame=limit)
        await b.listen("127.0.0.1", 0)
        a.set_peer(2, b.advertise)
        msg = snap_msg(os.urandom(4 * limit))
        assert a.send_raft(2, msg) and a.send_raft(2, {"type": 3, "after": True})
        while len(got) < 2:
            await asyncio.wait_for(arrived.wait(), 10)
            arrived.clear()
        assert got[0] == (1, msg) and got[1][1]["after"]  # whole, and in order with what follows
        assert a.stats.snapshot_chunks_sent == 8 and b.stats.bad_frames == 0
        await a.close()
        await b.close()

    asyncio.run(main())
