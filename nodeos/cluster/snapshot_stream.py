"""A Raft snapshot sent to a peer in bounded chunks, and put together again (pure: no I/O).

Raft's snapshot message (nodeos/cluster/raft/wire.py) carries the whole map. A map of 100,000
volumes is tens of MiB (docs/benchmarks.md, "Cluster map at scale"), above the peer port's
frame limit (nodeos/rpc/framing.py, DEFAULT_MAX_FRAME, 16 MiB): sent as one frame, the receiver
refused it and closed the connection, and the leader sent it again, forever. So the transport
(nodeos/cluster/transport.py) sends a snapshot message larger than CHUNK_BYTES as chunks:

    {id: sha256 of the data, seq, n, size, head, data}

`head` is the Raft message with the snapshot's data left out (its index, term and membership),
carried by every chunk so that any chunk names what it belongs to; `data` is the seq-th slice of
CHUNK_BYTES. The receiver's Assembler keeps, per sender, the chunks of one snapshot (a newer one
from that sender replaces it: memory is one snapshot per sender, at most MAX_SNAPSHOT_BYTES),
takes them in any order and ignores duplicates; once it holds all n it checks the size and the
SHA-256 of the whole before handing the Raft message on. A lost chunk leaves the snapshot
incomplete: the leader sends the snapshot again after Config.snapshot_retry_ticks, and the chunks
kept from the first attempt stay (same id), so the retry completes what is missing (resumes).
Nothing reaches Raft that was not checked whole.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

CHUNK_BYTES = 1 << 20  # well under the frame limit; the HMAC of a frame stays cheap
MAX_SNAPSHOT_BYTES = 1 << 30  # what a receiver holds of one snapshot under assembly
MAX_CHUNKS = MAX_SNAPSHOT_BYTES // 4096  # with a sender's chunk size of at least 4 KiB


def needs_chunks(msg: dict[str, Any], chunk_bytes: int = CHUNK_BYTES) -> bool:
    """True for a Raft wire message whose snapshot data is larger than one chunk."""
    snap = msg.get("snapshot")
    return isinstance(snap, dict) and len(snap.get("data") or b"") > chunk_bytes


def split(msg: dict[str, Any], chunk_bytes: int = CHUNK_BYTES) -> list[dict[str, Any]]:
    """The chunks of a Raft wire message carrying a snapshot (see the module's docstring)."""
    snap = msg["snapshot"]
    data: bytes = snap["data"]
    head = {**msg, "snapshot": {**snap, "data": b""}}
    digest = hashlib.sha256(data).digest()
    n = max(1, -(-len(data) // chunk_bytes))
    view = memoryview(data)
    return [
        {
            "id": digest,
            "seq": i,
            "n": n,
            "size": len(data),
            "head": head,
            "data": bytes(view[i * chunk_bytes : (i + 1) * chunk_bytes]),
        }
        for i in range(n)
    ]


@dataclass
class _Partial:
    id: bytes
    n: int
    size: int
    head: dict[str, Any]
    parts: dict[int, bytes] = field(default_factory=dict)
    held: int = 0  # bytes in parts


@dataclass
class AssemblerStats:
    chunks: int = 0
    duplicates: int = 0
    completed: int = 0
    superseded: int = 0  # partial snapshots dropped for a newer one from the same sender
    bad: int = 0  # malformed chunks, and snapshots whose size or checksum did not match


class Assembler:
    """Chunks in, whole checked Raft snapshot messages out; one snapshot per sender at a time."""

    def __init__(self, max_bytes: int = MAX_SNAPSHOT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._partial: dict[int, _Partial] = {}
        self.stats = AssemblerStats()

    def pending(self, peer: int) -> tuple[int, int] | None:
        """(chunks held, chunks in all) of the snapshot under assembly from `peer`, if any."""
        p = self._partial.get(peer)
        return None if p is None else (len(p.parts), p.n)

    def forget(self, peer: int) -> None:
        self._partial.pop(peer, None)

    def add(self, peer: int, chunk: Any) -> dict[str, Any] | None:
        """Take one chunk from `peer`; the whole Raft message once every chunk is here and
        checked, else None. ValueError for a malformed chunk or a snapshot that does not check."""
        try:
            cid, seq, n, size, head, data = self._fields(chunk)
        except ValueError:
            self.stats.bad += 1
            raise
        self.stats.chunks += 1
        p = self._partial.get(peer)
        if p is None or p.id != cid or p.n != n or p.size != size:
            if p is not None:
                self.stats.superseded += 1
            p = self._partial[peer] = _Partial(cid, n, size, head)
        p.head = head  # the latest attempt's term and commit
        if seq in p.parts:
            self.stats.duplicates += 1
            return None
        if p.held + len(data) > size:
            self.forget(peer)
            self.stats.bad += 1
            raise ValueError(f"snapshot chunks hold more than its size of {size} bytes")
        p.parts[seq] = data
        p.held += len(data)
        if len(p.parts) < n:
            return None
        self.forget(peer)
        whole = b"".join(p.parts[i] for i in range(n))
        if len(whole) != size or hashlib.sha256(whole).digest() != cid:
            self.stats.bad += 1
            raise ValueError(f"snapshot of {size} bytes in {n} chunks does not match its checksum")
        self.stats.completed += 1
        return {**p.head, "snapshot": {**p.head["snapshot"], "data": whole}}

    def _fields(self, c: Any) -> tuple[bytes, int, int, int, dict[str, Any], bytes]:
        if not isinstance(c, dict):
            raise ValueError("snapshot chunk: expected a map")
        cid, seq, n, size, head, data = (c.get(k) for k in ("id", "seq", "n", "size", "head", "data"))
        if not isinstance(cid, bytes) or len(cid) != 32:
            raise ValueError("snapshot chunk id: expected 32 bytes (SHA-256)")
        for name, v in (("seq", seq), ("n", n), ("size", size)):
            if type(v) is not int or v < 0:
                raise ValueError(f"snapshot chunk {name}: expected a non-negative int")
        assert isinstance(seq, int) and isinstance(n, int) and isinstance(size, int)
        if not 0 < n <= MAX_CHUNKS or seq >= n:
            raise ValueError(f"snapshot chunk {seq} of {n}: out of range")
        if size > self.max_bytes:
            raise ValueError(f"snapshot of {size} bytes is over this node's limit of {self.max_bytes}")
        if not isinstance(head, dict) or not isinstance(head.get("snapshot"), dict):
            raise ValueError("snapshot chunk head: expected a Raft message with a snapshot")
        if not isinstance(data, bytes):
            raise ValueError("snapshot chunk data: expected bytes")
        return cid, seq, n, size, head, data
