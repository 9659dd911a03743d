"""Raft consensus as a pure state machine (no clock, socket or disk), shaped like etcd-io/raft.

The application owns time, the network and the disk; Raft only decides. Usage loop::

    storage = MemoryStorage()            # or nodeos.cluster.raft_storage.LmdbRaftStorage
    bootstrap_storage(storage, voters=[1, 2, 3])   # only when creating a new cluster
    node = RawNode(Config(id=1), storage)

    while True:
        # inputs, in any order: node.tick() every tick interval;
        # node.step(from_wire(d)) for each message from a peer;
        # node.propose(data) / node.read_index(ctx) / node.propose_conf_change(cc)
        if node.has_ready():
            rd = node.ready()
            # 1. persist snapshot + entries + hard state in ONE synced transaction
            storage.persist(rd.hard_state, rd.entries, rd.snapshot)
            # 2. only now send messages (they may promise what was just persisted)
            for m in rd.messages:
                transport.send(m.to, to_wire(m))
            # 3. apply: restore rd.snapshot if any, then each committed entry in order;
            #    for EntryType.CONF_CHANGE entries call node.apply_conf_change(decode_conf_change(e.data))
            # 4. serve reads in rd.read_states once applied index >= read_state.index
            node.advance(rd)

Node ids are positive ints. A command is acknowledged to its client only once its entry
is committed AND applied. A lost snapshot should be reported with node.report_snapshot()
(the leader also re-probes by itself after Config.snapshot_retry_ticks).

Durable storage in the daemon: nodeos.cluster.raft_storage.LmdbRaftStorage(store), where
the Store was opened with the sub-databases in raft_storage.RAFT_DBS. Restarting: build the
RawNode from the same storage; with Config.applied=0 every committed entry after the
snapshot is handed out again (apply idempotently, or pass the applied index you persisted
and record membership with LmdbRaftStorage.set_conf_state).

Membership: a new node starts with EMPTY storage (no bootstrap_storage) and waits; the
leader proposes ConfChange(ADD_LEARNER, id), then ConfChange(ADD_VOTER, id) once the
learner caught up (Status.progress[id].match). Only one change may be pending; a second
one raises ProposalDropped. ConfChange(REMOVE, id) removes a voter or learner; a removed
leader steps down. Linearizable reads: node.read_index(unique_ctx), then serve the read
when a ReadState with that ctx arrived and the applied index reached ReadState.index.
"""

from .rawnode import RawNode, bootstrap_storage, split_messages
from .storage import MemoryStorage, Storage
from .types import (
    NONE,
    CompactedError,
    ConfChange,
    ConfChangeType,
    Config,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ProgressState,
    ProgressStatus,
    ProposalDropped,
    RaftError,
    ReadState,
    Ready,
    Snapshot,
    SnapshotMeta,
    SnapshotOutOfDate,
    SnapshotTemporarilyUnavailable,
    SoftState,
    StateRole,
    Status,
    UnavailableError,
)
from .wire import decode_conf_change, encode_conf_change, from_wire, to_wire

__all__ = [
    "NONE",
    "CompactedError",
    "ConfChange",
    "ConfChangeType",
    "ConfState",
    "Config",
    "Entry",
    "EntryType",
    "HardState",
    "MemoryStorage",
    "Message",
    "MessageType",
    "ProgressState",
    "ProgressStatus",
    "ProposalDropped",
    "RaftError",
    "RawNode",
    "ReadState",
    "Ready",
    "Snapshot",
    "SnapshotMeta",
    "SnapshotOutOfDate",
    "SnapshotTemporarilyUnavailable",
    "SoftState",
    "StateRole",
    "Status",
    "Storage",
    "UnavailableError",
    "bootstrap_storage",
    "decode_conf_change",
    "encode_conf_change",
    "from_wire",
    "split_messages",
    "to_wire",
]
