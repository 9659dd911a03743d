"""ReadIndex bookkeeping (paper section 6.4): a read is safe at the commit index the leader
had when the request arrived, once a quorum confirmed it was still leader afterwards."""

from __future__ import annotations

from dataclasses import dataclass, field

from .types import Message


@dataclass
class ReadIndexStatus:
    req: Message
    index: int
    acks: set[int] = field(default_factory=set)


class ReadOnly:
    def __init__(self) -> None:
        self.pending: dict[bytes, ReadIndexStatus] = {}
        self.queue: list[bytes] = []

    def add_request(self, index: int, m: Message) -> None:
        ctx = m.context
        if ctx in self.pending:
            return  # same context already waiting; contexts must be unique per request
        self.pending[ctx] = ReadIndexStatus(m, index)
        self.queue.append(ctx)

    def recv_ack(self, nid: int, ctx: bytes) -> set[int] | None:
        rs = self.pending.get(ctx)
        if rs is None:
            return None
        rs.acks.add(nid)
        return rs.acks

    def advance(self, ctx: bytes) -> list[ReadIndexStatus]:
        """Requests up to and including `ctx` are confirmed (later acks imply earlier ones)."""
        if ctx not in self.pending:
            return []
        n = self.queue.index(ctx) + 1
        done = [self.pending.pop(c) for c in self.queue[:n]]
        self.queue = self.queue[n:]
        return done

    def last_pending_ctx(self) -> bytes:
        return self.queue[-1] if self.queue else b""
