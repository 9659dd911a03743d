"""RawNode: the application's handle on a Raft node (etcd's rawnode.go).

Inputs: tick(), step(msg), propose(data), propose_conf_change(cc), read_index(ctx),
transfer_leadership(to), report_unreachable(id), report_snapshot(id, ok).
Output: ready() -> Ready, then advance(ready) once the Ready was handled.
"""

from __future__ import annotations

from .raft import Raft
from .storage import Storage
from .types import (
    EMPTY_HARD_STATE,
    LOCAL_TYPES,
    NONE,
    ConfChange,
    Config,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ProgressStatus,
    Ready,
    Snapshot,
    SnapshotMeta,
    SoftState,
    StateRole,
    Status,
)
from .wire import encode_conf_change


def bootstrap_storage(storage: Storage, voters: list[int]) -> None:
    """Create a brand-new cluster's initial state: a snapshot at index 1 holding the
    membership (the application's state for an empty snapshot is its empty state)."""
    if storage.last_index() != 0 or not storage.initial_state()[0].is_empty():
        raise ValueError("storage is not empty; refusing to bootstrap over existing state")
    ids = sorted(set(voters))
    if not ids or any(not isinstance(v, int) or v <= 0 for v in ids):
        raise ValueError("voters: expected a non-empty list of positive node ids")
    snap = Snapshot(SnapshotMeta(index=1, term=1, conf_state=ConfState(tuple(ids), ())), b"")
    storage.persist(HardState(term=1, vote=NONE, commit=1), [], snap)


# What a leader pushes to followers: its log and its commit index. Neither promises anything
# about this node's own disk (its own copy counts toward commit only once synced: see
# Raft._maybe_commit), so these may leave while the Ready that produced them is being written.
_SENDABLE_BEFORE_SYNC = frozenset({MessageType.APP, MessageType.HEARTBEAT, MessageType.SNAP})


def split_messages(rd: Ready) -> tuple[list[Message], list[Message]]:
    """(send now, send only once the Ready is durable). Everything that answers a peer (vote,
    append ack, read-index reply) or carries a term/vote not yet on disk waits for the sync."""
    if rd.term_or_vote_changed:
        return [], list(rd.messages)
    now: list[Message] = []
    later: list[Message] = []
    for m in rd.messages:
        (now if m.type in _SENDABLE_BEFORE_SYNC else later).append(m)
    return now, later


class RawNode:
    def __init__(self, config: Config, storage: Storage) -> None:
        self.raft = Raft(config, storage)
        self._prev_soft = self.raft.soft_state()
        self._prev_hard = self.raft.hard_state()

    # --- inputs ---
    def tick(self) -> None:
        self.raft.tick()

    def campaign(self) -> None:
        """Start an election now (tests and single-node bootstrap)."""
        self.raft.step(Message(MessageType.HUP, frm=self.raft.id))

    def step(self, msg: Message) -> None:
        """A message from a peer. Local-only types are refused."""
        if msg.type in LOCAL_TYPES:
            raise ValueError(f"message type {msg.type.name} is local-only and cannot come from a peer")
        if msg.to != self.raft.id:
            raise ValueError(f"message addressed to {msg.to}, this node is {self.raft.id}")
        self.raft.step(msg)

    def propose(self, data: bytes) -> None:
        """Raises ProposalDropped when this node cannot accept it (no leader, transfer, ...)."""
        self.propose_many([data])

    def propose_many(self, datas: list[bytes]) -> None:
        """Several proposals as one: consecutive entries, one append to each follower. All are
        taken or (ProposalDropped) none."""
        entries = tuple(Entry(0, 0, EntryType.NORMAL, d) for d in datas)
        self.raft.step(Message(MessageType.PROP, frm=self.raft.id, entries=entries))

    def propose_conf_change(self, cc: ConfChange) -> None:
        data = encode_conf_change(cc)
        self.raft.step(
            Message(MessageType.PROP, frm=self.raft.id, entries=(Entry(0, 0, EntryType.CONF_CHANGE, data),))
        )

    def apply_conf_change(self, cc: ConfChange) -> ConfState:
        """Call when a committed CONF_CHANGE entry is applied; returns the new membership."""
        return self.raft.apply_conf_change(cc)

    def read_index(self, ctx: bytes) -> None:
        """Request a linearizable read point; answered as a ReadState carrying `ctx` (unique)."""
        self.raft.step(Message(MessageType.READ_INDEX, frm=self.raft.id, context=ctx))

    def transfer_leadership(self, to: int) -> None:
        self.raft.step(Message(MessageType.TRANSFER_LEADER, frm=to))

    def report_unreachable(self, nid: int) -> None:
        self.raft.step(Message(MessageType.UNREACHABLE, frm=nid))

    def report_snapshot(self, nid: int, ok: bool) -> None:
        self.raft.step(Message(MessageType.SNAP_STATUS, frm=nid, reject=not ok))

    # --- outputs ---
    def take_messages_before_sync(self) -> list[Message]:
        """A leader's appends and heartbeats produced since the last ready(), to send while
        that Ready's write is still running (pipelining: followers write batch N+1 while the
        leader writes batch N). Empty unless this node leads in a term and vote already on
        disk (advance() is only called once a Ready is durable)."""
        r = self.raft
        ph = self._prev_hard
        if r.state is not StateRole.LEADER or r.term != ph.term or r.vote != ph.vote or not r.msgs:
            return []
        now = [m for m in r.msgs if m.type in _SENDABLE_BEFORE_SYNC]
        if now:
            r.msgs = [m for m in r.msgs if m.type not in _SENDABLE_BEFORE_SYNC]
        return now

    def has_ready(self) -> bool:
        r = self.raft
        log = r.log
        # Cheapest checks first: this runs after every input.
        if r.msgs or log.unstable.entries or r.read_states or log.has_pending_snapshot():
            return True
        ps, ph = self._prev_soft, self._prev_hard
        if r.lead != ps.leader or r.state is not ps.role:
            return True
        hs = (r.term, r.vote, log.committed)
        if hs != (ph.term, ph.vote, ph.commit) and hs != (0, 0, 0):
            return True
        return log.has_next_committed_ents()

    def ready(self) -> Ready:
        r = self.raft
        rd = Ready()
        soft = r.soft_state()
        if soft != self._prev_soft:
            rd.soft_state = soft
        hs = r.hard_state()
        if hs != self._prev_hard and hs != EMPTY_HARD_STATE:
            rd.hard_state = hs
        rd.entries = list(r.log.unstable.entries)
        rd.snapshot = r.log.unstable.snapshot
        rd.committed_entries = r.log.next_committed_ents()
        if rd.committed_entries:
            r.log.accept_applying(rd.committed_entries[-1].index)
        rd.messages, r.msgs = r.msgs, []
        rd.read_states, r.read_states = r.read_states, []
        rd.term_or_vote_changed = rd.hard_state is not None and (
            hs.term != self._prev_hard.term or hs.vote != self._prev_hard.vote
        )
        rd.must_sync = bool(rd.entries or rd.term_or_vote_changed or rd.snapshot is not None)
        return rd

    def advance(self, rd: Ready) -> None:
        r = self.raft
        if rd.soft_state is not None:
            self._prev_soft = rd.soft_state
        if rd.hard_state is not None:
            self._prev_hard = rd.hard_state
        if rd.snapshot is not None:
            r.log.stable_snap_to(rd.snapshot.index)
            # The application restored the snapshot before applying committed entries.
            if rd.snapshot.index > r.log.applied:
                r.log.applied = rd.snapshot.index
                r.log.applying = max(r.log.applying, rd.snapshot.index)
        if rd.entries:
            last = rd.entries[-1]
            r.log.stable_to(last.index, last.term)
            if r.state is StateRole.LEADER and r._maybe_commit():
                r._bcast_append()  # entries now on the leader's disk may commit
        if rd.committed_entries:
            r.log.applied_to(rd.committed_entries[-1].index)
            r._release_pending_reads()

    # --- introspection ---
    def status(self) -> Status:
        r = self.raft
        progress: dict[int, ProgressStatus] = {}
        if r.state is StateRole.LEADER:
            for nid, pr in sorted(r.trk.progress.items()):
                progress[nid] = ProgressStatus(
                    pr.match, pr.next, pr.state, pr.recent_active, pr.is_learner, pr.inflights.count()
                )
        return Status(
            id=r.id,
            hard_state=r.hard_state(),
            soft_state=SoftState(r.lead, r.state),
            applied=r.log.applied,
            progress=progress,
            lead_transferee=r.lead_transferee,
            conf_state=r.conf_state(),
        )
