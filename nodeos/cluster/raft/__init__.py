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
is committed AND applied. A lost snapshot should be reported with node.report_snapshot().
"""

from .rawnode import RawNode, bootstrap_storage
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
    "to_wire",
]
