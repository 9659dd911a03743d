"""Rules the simulator's random schedules reach too rarely to be their only guard (see the
mutation check in docs/testing.md): each test builds the one situation where the rule matters."""

from __future__ import annotations

from nodeos.cluster.raft import (
    Config,
    ConfState,
    Entry,
    EntryType,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    RawNode,
    Snapshot,
    SnapshotMeta,
    bootstrap_storage,
)

from .harness import Cluster


def _follower(entries: list[tuple[int, int, bytes]], commit: int) -> tuple[RawNode, MemoryStorage]:
    s = MemoryStorage()
    bootstrap_storage(s, [1, 2, 3])
    ents = [Entry(term, index, EntryType.NORMAL, data) for index, term, data in entries]
    s.persist(HardState(term=2, vote=1, commit=commit), ents, None)
    return RawNode(Config(id=2), s), s


def test_follower_commits_only_what_the_append_matched() -> None:
    # Our entry 3 ("x", term 2) never committed; the new leader's append carries only entry
    # 2 but its commit index is 4 (its own entry 3 is another one). Committing past the
    # entries this append matched would apply "x".
    rn, _ = _follower([(2, 2, b""), (3, 2, b"x")], commit=1)
    rn.step(
        Message(
            MessageType.APP,
            frm=3,
            to=2,
            term=3,
            index=1,
            log_term=1,
            entries=(Entry(2, 2, EntryType.NORMAL, b""),),
            commit=4,
        )
    )
    assert rn.raft.log.committed == 2


def test_read_index_needs_a_quorum_not_one_ack() -> None:
    # Five nodes; the old leader 1 keeps only node 2. The majority elected 3 and committed
    # "newer": 1 must not answer a read on the strength of node 2's ack alone.
    c = Cluster([1, 2, 3, 4, 5])
    c.elect(1)
    c.cut = {(a, b) for a in (1, 2) for b in (3, 4, 5)} | {(b, a) for a in (1, 2) for b in (3, 4, 5)}
    c.elect(3)
    c.propose(3, b"newer")
    c.members[1].node.read_index(b"stale?")
    c.process()
    assert c.members[1].read_states == []


def test_snapshot_behind_the_commit_index_is_not_installed() -> None:
    # Committed up to 5, compacted up to 4; a delayed snapshot at 3 arrives. Installing it
    # would move the commit index back.
    rn, s = _follower([(i, 2, b"e%d" % i) for i in range(2, 6)], commit=5)
    s.create_snapshot(4, ConfState((1, 2, 3), ()), b"s4")
    s.compact(4)
    rn = RawNode(Config(id=2), s)
    old = Snapshot(SnapshotMeta(3, 2, ConfState((1, 2, 3), ())), b"s3")
    rn.step(Message(MessageType.SNAP, frm=1, to=2, term=2, snapshot=old))
    assert rn.raft.log.committed == 5
    assert rn.ready().snapshot is None
