"""Raft paper section 5.3 (log replication) with batching and pipelining."""

from __future__ import annotations

from nodeos.cluster.raft import Entry, Message, MessageType, ProgressState

from .harness import Cluster


def test_leader_replicates_and_commits_then_followers_apply_in_order() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    for k in range(5):
        c.propose(1, b"cmd%d" % k)
    c.tick(2)
    for i in (1, 2, 3):
        assert c.members[i].applied == [b"cmd%d" % k for k in range(5)]
        assert c.raft(i).log.committed == c.raft(1).log.last_index()


def test_follower_rejects_append_whose_previous_entry_does_not_match() -> None:
    c = Cluster([1, 2, 3])
    r = c.raft(2)
    r.step(Message(MessageType.APP, to=2, frm=1, term=2, index=5, log_term=2, entries=(Entry(2, 6),)))
    resp = [m for m in r.msgs if m.type is MessageType.APP_RESP]
    assert resp and resp[-1].reject and resp[-1].reject_hint == r.log.last_index()


def test_conflicting_follower_entries_are_overwritten_by_the_leader() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"a")
    # The old leader, cut off, appends entries no one else receives (never committed).
    c.isolate(1)
    c.propose(1, b"lost1")
    c.propose(1, b"lost2")
    c.elect(2)
    c.propose(2, b"b")
    c.heal()
    c.tick(3)
    assert c.leader() == 2
    for i in (1, 2, 3):
        assert c.members[i].applied[-2:] == [b"a", b"b"]
        assert b"lost1" not in c.members[i].applied
        assert [(e.index, e.term) for e in c.raft(i).log.entries_from(2, None)] == [
            (e.index, e.term) for e in c.raft(2).log.entries_from(2, None)
        ]


def test_pipelining_keeps_several_appends_in_flight_up_to_the_window() -> None:
    c = Cluster([1, 2, 3], max_inflight_msgs=3, max_size_per_msg=1)
    c.elect(1)
    c.tick(1)
    c.cut |= {(1, 2), (2, 1)}  # 2's answers never arrive
    for k in range(6):
        c.members[1].node.propose(b"p%d" % k)
    c.process()
    pr = c.raft(1).trk.progress[2]
    assert pr.state is ProgressState.REPLICATE
    assert pr.inflights.count() == 3  # window full: the leader stops sending to 2
    assert pr.is_paused()
    # Node 3 still gets everything, so commits continue with a quorum of {1, 3}.
    assert c.members[3].applied == [b"p%d" % k for k in range(6)]


def test_batching_respects_max_size_per_msg() -> None:
    c = Cluster([1, 2], max_size_per_msg=100)
    c.elect(1)
    c.cut |= {(1, 2)}
    for _ in range(10):
        c.members[1].node.propose(b"x" * 30)
    c.process()
    c.heal()
    c.sent.clear()
    c.tick(3)
    apps = [m for m in c.sent_of(MessageType.APP) if m.entries]
    assert apps and all(len(m.entries) <= 2 for m in apps)  # 54 bytes each: 1 or 2 fit
    assert c.members[2].applied.count(b"x" * 30) == 10


def test_lagging_follower_is_found_by_probing_back() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(3)
    for k in range(20):
        c.propose(1, b"k%d" % k)
    c.heal()
    c.tick(3)
    assert c.members[3].applied == [b"k%d" % k for k in range(20)]
