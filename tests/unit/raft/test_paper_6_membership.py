"""Membership changes (paper section 6; thesis 4.1 single-server changes and 4.2.1
learners for catch-up)."""

from __future__ import annotations

import pytest

from nodeos.cluster.raft import (
    ConfChange,
    ConfChangeType,
    ConfState,
    MessageType,
    ProposalDropped,
    StateRole,
)

from .harness import Cluster


def change(c: Cluster, leader: int, t: ConfChangeType, nid: int) -> None:
    c.members[leader].node.propose_conf_change(ConfChange(t, nid))
    c.process()
    c.tick(2)


def test_learner_catches_up_without_voting_then_is_promoted() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"a")
    c.add_empty(4)
    change(c, 1, ConfChangeType.ADD_LEARNER, 4)
    assert c.members[1].conf == ConfState((1, 2, 3), (4,))
    c.propose(1, b"b")
    c.tick(2)
    assert c.members[4].applied[-1:] == [b"b"]  # caught up (via snapshot + log)
    assert c.raft(1).trk.committed() == c.raft(1).log.committed
    # A learner never campaigns.
    c.members[4].node.campaign()
    c.process()
    assert c.raft(4).state is StateRole.FOLLOWER
    change(c, 1, ConfChangeType.ADD_VOTER, 4)
    assert all(c.members[i].conf == ConfState((1, 2, 3, 4), ()) for i in (1, 2, 3, 4))


def test_quorum_grows_with_a_new_voter() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.add_empty(4)
    change(c, 1, ConfChangeType.ADD_LEARNER, 4)
    change(c, 1, ConfChangeType.ADD_VOTER, 4)
    # 4 voters: 1 and 2 alone are not a majority any more.
    c.cut = {(a, b) for a in (1, 2) for b in (3, 4)} | {(b, a) for a in (1, 2) for b in (3, 4)}
    before = c.raft(1).log.committed
    c.members[1].node.propose(b"needs-3-of-4")
    c.process()
    assert c.raft(1).log.committed == before
    c.heal()
    c.tick(2)
    assert c.members[1].applied[-1] == b"needs-3-of-4"


def test_only_one_membership_change_at_a_time() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.add_empty(4)
    c.add_empty(5)
    c.members[1].node.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, 4))
    with pytest.raises(ProposalDropped):
        c.members[1].node.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, 5))
    c.process()
    c.tick(1)
    change(c, 1, ConfChangeType.ADD_LEARNER, 5)  # accepted once the first was applied
    assert c.members[1].conf.learners == (4, 5)


def test_removed_leader_steps_down_and_the_rest_elect_a_new_one() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    change(c, 1, ConfChangeType.REMOVE, 1)
    assert c.raft(1).state is StateRole.FOLLOWER
    assert c.members[2].conf == ConfState((2, 3), ())
    c.tick(25, only=[2, 3])
    lead = c.leader()
    assert lead in (2, 3)
    c.propose(lead, b"after-removal")  # type: ignore[arg-type]
    assert c.members[2].applied[-1] == b"after-removal"


def test_removed_follower_no_longer_counts_for_commit() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    change(c, 1, ConfChangeType.REMOVE, 3)
    c.isolate(3)
    c.propose(1, b"two-of-two")
    assert c.members[2].applied[-1] == b"two-of-two"
    assert 3 not in c.raft(1).trk.progress


def learners_cluster(batch: int) -> Cluster:
    """Voters 1-3, learners 4 and 5, caught up and replicating."""
    c = Cluster([1, 2, 3], learner_batch=batch)
    c.elect(1)
    for i in (4, 5):
        c.add_empty(i)
        change(c, 1, ConfChangeType.ADD_LEARNER, i)
    c.propose(1, b"warm")
    c.tick(2)
    assert c.members[5].applied[-1:] == [b"warm"]
    return c


def appends_to(c: Cluster, since: int) -> list[int]:
    return [m.to for m in c.sent[since:] if m.type is MessageType.APP and m.entries]


def test_learners_are_off_the_commit_path_and_get_their_entries_with_the_heartbeat() -> None:
    """A proposal goes to the voters only (voters first); it commits on them; the learners get
    it with the next heartbeat round. A read barrier's round asks the voters alone."""
    c = learners_cluster(batch=32)
    since = len(c.sent)
    c.propose(1, b"x")
    assert sorted(appends_to(c, since)) == [2, 3]
    assert c.members[2].applied[-1] == b"x"  # committed without the learners
    assert c.members[4].applied[-1] == b"warm"
    since = len(c.sent)
    c.members[1].node.read_index(b"barrier")
    c.process()
    beats = [m.to for m in c.sent[since:] if m.type is MessageType.HEARTBEAT]
    assert sorted(beats) == [2, 3]
    assert c.members[1].read_states[-1].request_ctx == b"barrier"
    c.tick(1)
    assert c.members[4].applied[-1] == b"x" and c.members[5].applied[-1] == b"x"


def test_a_learner_with_a_batch_waiting_gets_it_at_once() -> None:
    """Under heavy writes a learner does not trail by a heartbeat's worth of entries: a full
    batch goes out as soon as it is there, so it stays within the promotion window."""
    c = learners_cluster(batch=4)
    since = len(c.sent)
    for k in range(3):
        c.propose(1, b"p%d" % k)
    assert 4 not in appends_to(c, since)
    c.propose(1, b"p3")
    assert appends_to(c, since).count(4) == 1 and appends_to(c, since).count(5) == 1
    assert c.raft(4).log.last_index() == c.raft(1).log.last_index()  # in its log; applied next round


def test_an_idle_learner_gets_a_heartbeat_every_few_rounds_and_the_commit_index_at_once() -> None:
    """At hundreds of members the heartbeat rounds are most of the leader's messages: an idle
    learner is beaten every learner_heartbeat_rounds rounds (voters every round). A learner that
    holds an entry but not yet its commit gets the commit index with the next round."""
    c = learners_cluster(batch=1)  # entries reach the learners before they commit
    since = len(c.sent)
    c.tick(10)
    beats = [m.to for m in c.sent[since:] if m.type is MessageType.HEARTBEAT]
    assert beats.count(2) == 10 and beats.count(3) == 10
    assert beats.count(4) == 2 and beats.count(5) == 2
    for k in range(5):
        c.propose(1, b"c%d" % k)
        assert c.members[4].applied[-1] != b"c%d" % k  # appended before it committed
        c.tick(1)
        assert c.members[4].applied[-1] == b"c%d" % k and c.members[5].applied[-1] == b"c%d" % k
