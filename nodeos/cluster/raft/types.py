"""Public data types of the Raft library, shaped like etcd-io/raft's raftpb.

Node ids are positive ints; 0 (NONE) means "nobody" (no vote, no leader).
Every type here is plain data: no clock, socket or disk.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NONE = 0  # "no node": no vote cast, no known leader


class EntryType(enum.IntEnum):
    NORMAL = 0
    CONF_CHANGE = 1


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""

    def size(self) -> int:
        """Approximate wire size, used for batching limits."""
        return len(self.data) + 24


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be on stable storage before any message depending on it is sent."""

    term: int = 0
    vote: int = NONE
    commit: int = 0

    def is_empty(self) -> bool:
        return self == EMPTY_HARD_STATE


EMPTY_HARD_STATE = HardState()


@dataclass(frozen=True, slots=True)
class ConfState:
    voters: tuple[int, ...] = ()
    learners: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: int = 0
    term: int = 0
    conf_state: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The application state at `meta.index`, plus the membership at that point."""

    meta: SnapshotMeta = field(default_factory=SnapshotMeta)
    data: bytes = b""

    @property
    def index(self) -> int:
        return self.meta.index

    @property
    def term(self) -> int:
        return self.meta.term

    def is_empty(self) -> bool:
        return self.meta.index == 0


EMPTY_SNAPSHOT = Snapshot()


class MessageType(enum.IntEnum):
    # Local-only messages (never on the wire, except where noted by WIRE_TYPES).
    HUP = 0  # start an election
    BEAT = 1  # leader: send heartbeats
    PROP = 2  # propose entries (followers forward these to the leader)
    APP = 3  # append entries
    APP_RESP = 4
    VOTE = 5
    VOTE_RESP = 6
    SNAP = 7  # install snapshot
    HEARTBEAT = 8
    HEARTBEAT_RESP = 9
    UNREACHABLE = 10  # local: a peer could not be reached
    SNAP_STATUS = 11  # local: snapshot delivery finished (reject = failed)
    CHECK_QUORUM = 12  # local: leader checks it still hears from a quorum
    TRANSFER_LEADER = 13  # ask the leader to hand leadership to `frm`
    TIMEOUT_NOW = 14  # leader -> transferee: campaign now
    READ_INDEX = 15  # ask for a linearizable read point
    READ_INDEX_RESP = 16
    PRE_VOTE = 17
    PRE_VOTE_RESP = 18


LOCAL_TYPES = frozenset(
    {
        MessageType.HUP,
        MessageType.BEAT,
        MessageType.UNREACHABLE,
        MessageType.SNAP_STATUS,
        MessageType.CHECK_QUORUM,
    }
)
WIRE_TYPES = frozenset(set(MessageType) - LOCAL_TYPES)
RESPONSE_TYPES = frozenset(
    {
        MessageType.APP_RESP,
        MessageType.VOTE_RESP,
        MessageType.HEARTBEAT_RESP,
        MessageType.READ_INDEX_RESP,
        MessageType.PRE_VOTE_RESP,
    }
)


@dataclass(frozen=True, slots=True)
class Message:
    type: MessageType
    to: int = NONE
    frm: int = NONE
    term: int = 0
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    context: bytes = b""


class StateRole(enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    PRE_CANDIDATE = "pre-candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state, useful for logging and routing; not persisted."""

    leader: int = NONE
    role: StateRole = StateRole.FOLLOWER


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the local state machine applied `index`."""

    index: int
    request_ctx: bytes


@dataclass(slots=True)
class Ready:
    """Work handed to the application by RawNode.ready().

    Order of handling: persist `snapshot`, `entries` and `hard_state` in ONE synced
    transaction (only when `must_sync`: a change of the commit index alone may be written
    lazily, a crash only makes the node re-learn it); then send `messages`; then apply
    `snapshot` and `committed_entries` to the state machine; then call RawNode.advance(ready).
    The messages rawnode.split_messages() names may leave before the write (a leader's
    appends and heartbeats): they promise nothing about this node's disk.
    """

    soft_state: SoftState | None = None
    hard_state: HardState | None = None
    read_states: list[ReadState] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    committed_entries: list[Entry] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    must_sync: bool = False
    term_or_vote_changed: bool = False  # this Ready's hard state changes what a vote promises

    def contains_updates(self) -> bool:
        return bool(
            self.soft_state is not None
            or self.hard_state is not None
            or self.read_states
            or self.entries
            or self.snapshot is not None
            or self.committed_entries
            or self.messages
        )


class ConfChangeType(enum.IntEnum):
    ADD_VOTER = 0  # add a voter, or promote a learner
    ADD_LEARNER = 1  # add a learner, or demote a voter
    REMOVE = 2


@dataclass(frozen=True, slots=True)
class ConfChange:
    """One membership change. Only one may be pending at a time (single-server changes)."""

    type: ConfChangeType
    node_id: int
    context: bytes = b""


class ProgressState(enum.Enum):
    PROBE = "probe"  # one append in flight until the follower's match is known
    REPLICATE = "replicate"  # pipelined appends, bounded by the inflight window
    SNAPSHOT = "snapshot"  # a snapshot is on its way; no appends


@dataclass(frozen=True, slots=True)
class ProgressStatus:
    match: int
    next: int
    state: ProgressState
    recent_active: bool
    is_learner: bool
    inflight: int


@dataclass(frozen=True, slots=True)
class Status:
    id: int
    hard_state: HardState
    soft_state: SoftState
    applied: int
    progress: dict[int, ProgressStatus]  # only filled on the leader
    lead_transferee: int
    conf_state: ConfState


@dataclass(slots=True)
class Config:
    """Parameters of one Raft node. Ticks are the only notion of time."""

    id: int
    election_tick: int = 10  # followers campaign after [election_tick, 2*election_tick) idle ticks
    heartbeat_tick: int = 1
    applied: int = 0  # last index applied by the application before a restart
    max_size_per_msg: int = 1 << 20  # bytes of entries in one append (at least one entry)
    max_committed_size_per_ready: int = 1 << 24
    max_inflight_msgs: int = 256  # pipelined appends in flight per follower
    # A learner is not on the commit path: it gets entries with each heartbeat round, or as soon
    # as this many wait for it, not one append per proposal (30 members: 27 learners' appends,
    # acknowledgements and synced writes per commit slowed every commit 15 times).
    learner_batch: int = 32
    # An idle learner (nothing to send it) gets a heartbeat every this many rounds, staggered by
    # id: at hundreds of members the rounds are most of the leader's messages. Learners do not
    # vote; the spacing is held under half the election timeout (learner_beat_every) so a
    # learner never doubts its leader.
    learner_heartbeat_rounds: int = 5
    snapshot_retry_ticks: int = 50  # leader re-probes a follower whose snapshot got no answer
    # Snapshots the leader sends at once: each is a copy of the whole map in its peer's queue
    # (tens of MiB at 100,000 volumes), so a rack of new members must not take them all at once;
    # the others wait in probe and are offered one as a transfer finishes.
    max_snapshots_inflight: int = 2
    check_quorum: bool = True  # leader steps down when it loses contact with a quorum
    pre_vote: bool = True  # a partitioned node cannot disrupt the cluster on return
    step_down_on_removal: bool = True
    random_seed: int | None = None  # seeds the election timeout jitter (simulator: deterministic)

    def learner_beat_every(self) -> int:
        """Rounds between an idle learner's heartbeats."""
        return max(1, min(self.learner_heartbeat_rounds, self.election_tick // (2 * self.heartbeat_tick)))

    def validate(self) -> None:
        if not isinstance(self.id, int) or self.id <= 0:
            raise ValueError(f"config.id must be a positive int, got {self.id!r}")
        if self.heartbeat_tick <= 0:
            raise ValueError("config.heartbeat_tick must be > 0")
        if self.learner_batch <= 0:
            raise ValueError("config.learner_batch must be > 0")
        if self.learner_heartbeat_rounds <= 0:
            raise ValueError("config.learner_heartbeat_rounds must be > 0")
        if self.max_snapshots_inflight <= 0:
            raise ValueError("config.max_snapshots_inflight must be > 0")
        if self.election_tick <= self.heartbeat_tick:
            raise ValueError("config.election_tick must be greater than config.heartbeat_tick")
        if self.max_inflight_msgs <= 0:
            raise ValueError("config.max_inflight_msgs must be > 0")
        if self.max_size_per_msg <= 0:
            raise ValueError("config.max_size_per_msg must be > 0")


# --- errors -------------------------------------------------------------------------


class RaftError(Exception):
    """Base class of errors raised by the Raft library."""


class ProposalDropped(RaftError):
    """The proposal was not accepted (no leader, transfer in progress, learner, ...)."""


class CompactedError(RaftError):
    """The requested index is older than the first index kept in storage."""


class UnavailableError(RaftError):
    """The requested index is newer than the last index in storage."""


class SnapshotTemporarilyUnavailable(RaftError):
    """The storage cannot produce a snapshot right now; try later."""


class SnapshotOutOfDate(RaftError):
    """A snapshot older than the one already stored."""
