"""Raft paper section 5.2 (leader election) and Figure 3's election safety."""

from __future__ import annotations

from nodeos.cluster.raft import Message, MessageType, StateRole

from .harness import Cluster


def test_follower_campaigns_after_election_timeout_and_one_leader_wins() -> None:
    c = Cluster([1, 2, 3])
    assert c.leader() is None
    c.tick(2 * 10 + 1)  # election_tick=10: the timeout is randomized in [10, 20)
    lead = c.leader()
    assert lead is not None
    term = c.raft(lead).term
    assert [c.raft(i).state for i in (1, 2, 3)].count(StateRole.LEADER) == 1
    assert all(c.raft(i).lead == lead and c.raft(i).term == term for i in (1, 2, 3))


def test_randomized_election_timeouts_differ_between_nodes() -> None:
    c = Cluster([1, 2, 3, 4, 5])
    timeouts = {c.raft(i).randomized_election_timeout for i in c.members}
    assert len(timeouts) > 1
    assert all(10 <= t < 20 for t in timeouts)


def test_candidate_with_majority_becomes_leader_and_appends_noop() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    r = c.raft(1)
    assert r.state is StateRole.LEADER
    last = r.log.last_index()
    assert r.log.term(last) == r.term  # the empty entry of the new term
    assert all(c.raft(i).log.committed == last for i in (1, 2, 3))


def test_each_node_votes_at_most_once_per_term() -> None:
    c = Cluster([1, 2, 3], pre_vote=False)
    n3 = c.raft(3)
    term = n3.term + 1
    n3.step(Message(MessageType.VOTE, to=3, frm=1, term=term, index=1, log_term=1))
    n3.step(Message(MessageType.VOTE, to=3, frm=2, term=term, index=1, log_term=1))
    resp = [m for m in n3.msgs if m.type is MessageType.VOTE_RESP]
    assert [(m.to, m.reject) for m in resp] == [(1, False), (2, True)]
    assert n3.vote == 1


def test_candidate_steps_down_on_append_from_leader_of_its_term() -> None:
    c = Cluster([1, 2, 3], pre_vote=False)
    c.isolate(2)
    c.members[2].node.campaign()
    c.process()
    r2 = c.raft(2)
    assert r2.state is StateRole.CANDIDATE
    r2.step(Message(MessageType.APP, to=2, frm=1, term=r2.term, index=1, log_term=1))
    assert r2.state is StateRole.FOLLOWER and r2.lead == 1


def test_split_vote_is_resolved_by_a_later_election() -> None:
    c = Cluster([1, 2, 3, 4], pre_vote=False)
    # 1 and 2 campaign at once: neither can reach 3 of 4 votes if 3 and 4 split.
    c.members[1].node.campaign()
    c.members[2].node.campaign()
    c.process()
    c.tick(25)
    assert c.leader() is not None


def test_vote_request_of_higher_term_updates_term_and_persists_vote() -> None:
    c = Cluster([1, 2, 3], pre_vote=False, check_quorum=False)
    c.elect(1)
    c.isolate(1)
    c.members[2].node.campaign()
    c.process()
    assert c.leader() == 2  # with 3's vote, which is on 3's disk before 2 hears of it
    hs, _ = c.members[3].storage.initial_state()
    assert hs.vote == 2 and hs.term == c.raft(2).term
