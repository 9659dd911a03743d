"""Log compaction and snapshot install (paper section 7)."""

from __future__ import annotations

from nodeos.cluster.raft import MessageType, ProgressState

from .harness import Cluster


def test_lagging_follower_receives_snapshot_after_leader_compacted() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(3)
    for k in range(10):
        c.propose(1, b"k%d" % k)
    leader = c.members[1]
    applied = c.raft(1).log.applied
    leader.storage.create_snapshot(applied, leader.conf, b"state-after-k9")
    leader.storage.compact(applied)
    c.heal()
    c.tick(3)
    snaps = c.sent_of(MessageType.SNAP)
    assert snaps and snaps[0].to == 3
    assert c.members[3].storage.snapshot().data == b"state-after-k9"
    assert c.raft(1).trk.progress[3].state is ProgressState.REPLICATE
    c.propose(1, b"after-snapshot")
    assert c.members[3].applied == [b"after-snapshot"]  # earlier commands came in the snapshot


def test_failed_snapshot_is_retried() -> None:
    c = Cluster([1, 2, 3], snapshot_retry_ticks=5)
    c.elect(1)
    c.isolate(3)
    for k in range(4):
        c.propose(1, b"k%d" % k)
    applied = c.raft(1).log.applied
    c.members[1].storage.create_snapshot(applied, c.members[1].conf, b"snap")
    c.members[1].storage.compact(applied)
    c.heal()
    c.drop = lambda m: m.type is MessageType.SNAP
    c.tick(3)
    assert c.raft(1).trk.progress[3].state is ProgressState.SNAPSHOT
    c.drop = None
    c.tick(8)  # no answer within snapshot_retry_ticks: probe and send it again
    assert c.members[3].storage.snapshot().data == b"snap"
    assert c.raft(1).trk.progress[3].state is ProgressState.REPLICATE


def test_reported_snapshot_failure_goes_back_to_probing() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(3)
    c.propose(1, b"k")
    applied = c.raft(1).log.applied
    c.members[1].storage.create_snapshot(applied, c.members[1].conf, b"snap")
    c.members[1].storage.compact(applied)
    c.heal()
    c.drop = lambda m: m.type is MessageType.SNAP
    c.tick(3)
    c.members[1].node.report_snapshot(3, ok=False)
    assert c.raft(1).trk.progress[3].state is ProgressState.PROBE
    c.drop = None
    c.tick(3)
    assert c.members[3].storage.snapshot().data == b"snap"


def test_follower_restart_recovers_from_its_own_snapshot_and_log() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    for k in range(6):
        c.propose(1, b"k%d" % k)
    m2 = c.members[2]
    applied = c.raft(2).log.applied
    m2.storage.create_snapshot(applied - 2, m2.conf, b"s")
    m2.storage.compact(applied - 2)
    c.restart(2)
    c.process()
    # Committed entries after the snapshot are applied again after the restart.
    assert m2.applied == [b"k4", b"k5"]
    assert c.raft(2).log.committed == c.raft(1).log.committed
