"""A tiny synchronous cluster for unit tests: real RawNodes and MemoryStorage, messages
delivered in order unless a link is cut. (Random faults live in the simulator.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nodeos.cluster.raft import (
    Config,
    ConfState,
    EntryType,
    MemoryStorage,
    Message,
    MessageType,
    RawNode,
    ReadState,
    StateRole,
    Storage,
    bootstrap_storage,
    decode_conf_change,
    from_wire,
    to_wire,
)


@dataclass
class Member:
    node: RawNode
    storage: Storage
    applied: list[bytes] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    conf: ConfState = field(default_factory=ConfState)


class Cluster:
    def __init__(
        self,
        ids: list[int],
        *,
        voters: list[int] | None = None,
        storage: Callable[[int], Storage] | None = None,
        **cfg: object,
    ) -> None:
        self.cfg = cfg
        self.new_storage = storage or (lambda i: MemoryStorage())
        self.members: dict[int, Member] = {}
        self.cut: set[tuple[int, int]] = set()
        self.sent: list[Message] = []  # every message delivered, for assertions
        self.drop: Callable[[Message], bool] | None = None  # extra message filter
        self.rewrite: Callable[[Message], Message] | None = None  # alters messages in flight
        for i in ids:
            s = self.new_storage(i)
            bootstrap_storage(s, voters or ids)
            self.members[i] = Member(self._node(i, s), s, conf=s.initial_state()[1])

    def _node(self, i: int, s: Storage) -> RawNode:
        return RawNode(Config(id=i, random_seed=i, **self.cfg), s)  # type: ignore[arg-type]

    def add_empty(self, i: int) -> None:
        """A brand-new machine (empty disk) that will be added by a conf change."""
        s = self.new_storage(i)
        self.members[i] = Member(self._node(i, s), s)

    def restart(self, i: int, storage: Storage | None = None) -> None:
        """A crash and restart from what is on disk (optionally a reopened storage)."""
        m = self.members[i]
        if storage is not None:
            m.storage = storage
        m.node = self._node(i, m.storage)
        m.applied = []

    def raft(self, i: int):
        return self.members[i].node.raft

    def isolate(self, i: int) -> None:
        for j in self.members:
            if j != i:
                self.cut |= {(i, j), (j, i)}

    def heal(self) -> None:
        self.cut.clear()

    def leader(self) -> int | None:
        ls = [i for i, m in self.members.items() if m.node.raft.state is StateRole.LEADER]
        return max(ls, key=lambda i: self.raft(i).term) if ls else None

    def process(self, max_rounds: int = 1000) -> None:
        """Handle Readies and deliver messages until nothing moves."""
        for _ in range(max_rounds):
            msgs: list[Message] = []
            for m in self.members.values():
                n = m.node
                if not n.has_ready():
                    continue
                rd = n.ready()
                m.storage.persist(rd.hard_state, rd.entries, rd.snapshot)
                msgs.extend(rd.messages)
                if rd.snapshot is not None:
                    m.conf = rd.snapshot.meta.conf_state
                for e in rd.committed_entries:
                    if e.type is EntryType.CONF_CHANGE:
                        m.conf = n.apply_conf_change(decode_conf_change(e.data))
                    elif e.data:
                        m.applied.append(e.data)
                m.read_states.extend(rd.read_states)
                n.advance(rd)
            if not msgs:
                return
            for msg in msgs:
                self.deliver(msg)
        raise AssertionError("cluster did not quiesce")

    def deliver(self, msg: Message) -> None:
        if (msg.frm, msg.to) in self.cut or msg.to not in self.members:
            return
        if self.drop is not None and self.drop(msg):
            return
        if self.rewrite is not None:
            msg = self.rewrite(msg)
        self.sent.append(msg)
        self.members[msg.to].node.step(from_wire(to_wire(msg)))

    def tick(self, n: int = 1, only: list[int] | None = None) -> None:
        for _ in range(n):
            for i, m in self.members.items():
                if only is None or i in only:
                    m.node.tick()
            self.process()

    def elect(self, i: int) -> None:
        """Node i campaigns after the others' leader lease ran out (as if an election
        timeout passed without word from the old leader)."""
        for m in self.members.values():
            r = m.node.raft
            if r.state is not StateRole.LEADER:
                r.election_elapsed = max(r.election_elapsed, r.cfg.election_tick)
        self.members[i].node.campaign()
        self.process()
        assert self.leader() == i, f"expected {i} to lead, got {self.leader()}"

    def propose(self, i: int, data: bytes) -> None:
        self.members[i].node.propose(data)
        self.process()

    def sent_of(self, t: MessageType) -> list[Message]:
        return [m for m in self.sent if m.type is t]
