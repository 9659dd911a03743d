"""A learner far behind catches up from a snapshot sent in chunks (nodeos/cluster/
snapshot_stream.py) between real RawNodes: chunks shuffled, one lost on the first attempt; the
leader's retry completes it and the learner then follows the log."""

from __future__ import annotations

import os
import random

from nodeos.cluster.raft import (
    ConfChange,
    ConfChangeType,
    Message,
    MessageType,
    ProgressState,
    from_wire,
    to_wire,
)
from nodeos.cluster.snapshot_stream import Assembler, split

from .harness import Cluster

CHUNK = 4096


class ChunkedCluster(Cluster):
    """Snapshots go as chunks, shuffled; `lose` names chunk numbers lost on their first sending."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.assembler = Assembler()
        self.rng = random.Random(5)
        self.lose: set[int] = set()
        self.chunks_sent = 0

    def deliver(self, msg: Message) -> None:
        if msg.type is not MessageType.SNAP or (msg.frm, msg.to) in self.cut:
            super().deliver(msg)
            return
        chunks = split(to_wire(msg), CHUNK)
        self.chunks_sent += len(chunks)
        self.rng.shuffle(chunks)
        for c in chunks:
            if c["seq"] in self.lose:
                self.lose.discard(c["seq"])
                continue
            whole = self.assembler.add(msg.frm, c)
            if whole is not None:
                self.sent.append(msg)
                self.members[msg.to].node.step(from_wire(whole))


def test_a_learner_far_behind_catches_up_from_a_multi_chunk_snapshot_with_a_lost_chunk() -> None:
    c = ChunkedCluster([1, 2, 3], snapshot_retry_ticks=5)
    c.elect(1)
    for k in range(60):
        c.propose(1, b"cmd-%d" % k)
    leader = c.members[1]
    applied = c.raft(1).log.applied
    state = os.urandom(20 * CHUNK + 123)  # the map as of `applied`
    leader.storage.create_snapshot(applied, leader.conf, state)
    leader.storage.compact(applied)
    c.add_empty(4)
    c.lose = {7}
    leader.node.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, 4))
    c.process()
    c.tick(2)
    assert c.members[4].storage.snapshot().is_empty()  # chunk 7 lost: nothing restored
    assert c.assembler.pending(1) == (20, 21)
    assert c.raft(1).trk.progress[4].state is ProgressState.SNAPSHOT
    c.tick(8)  # no answer within snapshot_retry_ticks: the leader sends it again
    assert c.members[4].storage.snapshot().data == state
    assert c.assembler.stats.completed == 1 and c.assembler.stats.duplicates >= 1  # kept, not sent twice
    assert c.chunks_sent >= 2 * 21
    c.propose(1, b"after")
    c.tick(1)  # a learner's entries ride the heartbeat round
    assert c.members[4].applied[-1:] == [b"after"]
    assert c.raft(1).trk.progress[4].state is ProgressState.REPLICATE
    assert c.raft(4).log.applied == c.raft(1).log.applied


def test_the_leader_sends_at_most_max_snapshots_inflight_snapshots_at_once() -> None:
    """Five new members that all need the map: two snapshots in flight, the rest wait in probe
    (each snapshot is a copy of the whole map in its peer's queue); all five catch up in turn."""
    c = Cluster([1, 2, 3], max_snapshots_inflight=2, snapshot_retry_ticks=5)
    c.elect(1)
    for k in range(10):
        c.propose(1, b"cmd-%d" % k)
    leader = c.members[1]
    applied = c.raft(1).log.applied
    leader.storage.create_snapshot(applied, leader.conf, b"the map")
    leader.storage.compact(applied)
    c.drop = lambda m: m.type is MessageType.SNAP  # transfers that do not finish yet
    new = [4, 5, 6, 7, 8]
    for i in new:
        c.add_empty(i)
        leader.node.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, i))
        c.process()
        c.tick(1)
    states = [c.raft(1).trk.progress[i].state for i in new]
    assert states.count(ProgressState.SNAPSHOT) == 2, states
    assert states.count(ProgressState.PROBE) == 3, states
    c.drop = None
    c.tick(30)
    c.propose(1, b"after")
    c.tick(2)
    assert all(c.members[i].applied[-1:] == [b"after"] for i in new)
