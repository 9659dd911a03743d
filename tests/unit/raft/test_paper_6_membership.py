"""Membership changes (paper section 6; thesis 4.1 single-server changes and 4.2.1
learners for catch-up)."""

from __future__ import annotations

import pytest

from nodeos.cluster.raft import ConfChange, ConfChangeType, ConfState, ProposalDropped, StateRole

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
