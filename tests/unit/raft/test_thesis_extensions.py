"""Extensions from Ongaro's thesis: pre-vote (9.6), check-quorum / leader lease (6.2),
leadership transfer (3.10), linearizable reads with ReadIndex (6.4)."""

from __future__ import annotations

import pytest

from nodeos.cluster.raft import MessageType, ProposalDropped, StateRole

from .harness import Cluster


def test_9_6_prevote_partitioned_node_does_not_disrupt_on_return() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    term = c.raft(1).term
    c.isolate(3)
    c.tick(60)
    assert c.raft(3).term == term  # pre-votes failed: its term never grew
    c.heal()
    c.tick(5)
    assert c.leader() == 1 and c.raft(1).term == term


def test_9_6_without_prevote_a_returning_node_forces_a_new_term() -> None:
    c = Cluster([1, 2, 3], pre_vote=False, check_quorum=False)
    c.elect(1)
    term = c.raft(1).term
    c.isolate(3)
    c.tick(60)
    assert c.raft(3).term > term  # the disruption pre-vote exists to prevent
    c.heal()
    c.tick(30)
    assert c.raft(c.leader() or 1).term > term


def test_6_2_check_quorum_isolated_leader_steps_down() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(1)
    # Activity is judged per election timeout: within two of them the leader notices.
    c.tick(21, only=[1])
    assert c.raft(1).state is StateRole.FOLLOWER


def test_6_2_leader_lease_followers_ignore_votes_while_hearing_from_leader() -> None:
    c = Cluster([1, 2, 3], pre_vote=False)
    c.elect(1)
    term = c.raft(1).term
    c.cut |= {(3, 1), (1, 3)}
    c.members[3].node.campaign()
    c.process()
    # 2 heard from leader 1 within the election timeout and ignored 3's vote request.
    assert c.leader() == 1 and c.raft(2).term == term


def test_3_10_leadership_transfer() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"before")
    c.members[1].node.transfer_leadership(3)
    c.process()
    assert c.leader() == 3
    assert c.sent_of(MessageType.TIMEOUT_NOW)
    c.propose(3, b"after")
    assert c.members[1].applied[-2:] == [b"before", b"after"]


def test_3_10_transfer_to_lagging_follower_catches_it_up_first_and_blocks_proposals() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(3)
    for k in range(5):
        c.propose(1, b"k%d" % k)
    c.members[1].node.transfer_leadership(3)
    c.process()
    assert c.raft(1).lead_transferee == 3
    with pytest.raises(ProposalDropped):
        c.members[1].node.propose(b"during-transfer")
    c.heal()
    c.tick(2)
    assert c.leader() == 3
    assert c.members[3].applied == [b"k%d" % k for k in range(5)]


def test_3_10_transfer_abandoned_after_an_election_timeout() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(3)
    c.members[1].node.transfer_leadership(3)
    c.process()
    c.tick(11, only=[1, 2])
    assert c.raft(1).lead_transferee == 0
    c.propose(1, b"accepted-again")
    assert c.members[2].applied[-1] == b"accepted-again"


def test_6_4_read_index_on_leader_after_quorum_heartbeat() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"w")
    c.members[1].node.read_index(b"read-1")
    c.process()
    (rs,) = c.members[1].read_states
    assert rs.request_ctx == b"read-1"
    assert rs.index == c.raft(1).log.committed


def test_6_4_read_index_from_follower_is_answered_through_leader() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"w")
    c.members[2].node.read_index(b"f-read")
    c.process()
    (rs,) = c.members[2].read_states
    assert rs.index >= c.raft(1).log.committed - 0 and rs.request_ctx == b"f-read"


def test_6_4_deposed_leader_cannot_serve_reads() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(1)
    c.elect(2)
    c.propose(2, b"newer")
    c.members[1].node.read_index(b"stale?")  # 1 still believes it leads
    c.process()
    assert c.members[1].read_states == []


def test_6_4_read_waits_for_new_leaders_first_commit() -> None:
    c = Cluster([1, 2, 3])
    c.drop = lambda m: m.type is MessageType.APP_RESP  # nothing commits in the new term
    c.members[1].node.campaign()
    c.process()
    assert c.leader() == 1
    c.members[1].node.read_index(b"early")
    c.process()
    assert c.members[1].read_states == []  # its commit index may still be stale
    c.drop = None
    c.tick(2)
    (rs,) = c.members[1].read_states
    assert rs.index == c.raft(1).log.committed


def test_proposal_without_leader_is_refused() -> None:
    c = Cluster([1, 2, 3])
    with pytest.raises(ProposalDropped):
        c.members[2].node.propose(b"x")
    with pytest.raises(ProposalDropped):
        c.members[2].node.read_index(b"r")
