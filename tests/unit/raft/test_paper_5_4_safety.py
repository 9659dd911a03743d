"""Raft paper section 5.4: the election restriction (5.4.1) and committing entries from
previous terms (5.4.2, Figure 8)."""

from __future__ import annotations

from dataclasses import replace

from nodeos.cluster.raft import Message, MessageType

from .harness import Cluster


def test_5_4_1_voter_rejects_candidate_with_less_up_to_date_log() -> None:
    c = Cluster([1, 2, 3], pre_vote=False, check_quorum=False)
    c.elect(1)
    c.isolate(3)
    c.propose(1, b"only-on-1-and-2")
    r2 = c.raft(2)
    # 3's log ends before the new entry: 2 must refuse it even in a newer term.
    r2.step(Message(MessageType.VOTE, to=2, frm=3, term=r2.term + 1, index=2, log_term=2))
    resp = [m for m in r2.msgs if m.type is MessageType.VOTE_RESP][-1]
    assert resp.reject
    c.heal()
    c.process()
    c.members[3].node.campaign()
    c.process()
    assert c.leader() != 3


def _figure_8(broken: bool) -> tuple[Cluster, int]:
    """Figure 8 on five nodes, up to (d): node 5 has won term 5 with a later last term
    than the entry node 1 re-replicated in (c). Returns the cluster and node 1's commit
    index right after (c)."""
    c = Cluster([1, 2, 3, 4, 5], pre_vote=False, check_quorum=False, max_size_per_msg=1)
    c.raft(1).test_commit_any_term = broken
    c.elect(1)  # term 2, its empty entry at index 2 committed everywhere
    # (a) 1 appends index 3 (term 2) and reaches only 2.
    c.cut = {(1, 3), (1, 4), (1, 5)}
    c.propose(1, b"x")
    # (b) 1 is down; 5 wins term 3 (votes of 3, 4) and appends index 3 (term 3) alone.
    c.heal()
    c.isolate(1)
    c.drop = lambda m: m.frm == 5 and m.type is MessageType.APP
    c.elect(5)
    # (c) 1 restarts, leads term 4, and copies index 3 (term 2) to 3: now on a majority.
    c.drop = None
    c.heal()
    c.isolate(5)
    c.restart(1)
    c.raft(1).test_commit_any_term = broken
    # Entries of term 4 never arrive anywhere (node 1 "crashes" before they spread).
    c.rewrite = lambda m: replace(m, entries=tuple(e for e in m.entries if e.term != 4))
    c.members[1].node.campaign()  # loses term 3 (3 and 4 voted for 5), learns the term
    c.process()
    c.elect(1)
    assert c.raft(1).term == 4
    c.tick(2)
    assert [c.raft(i).log.zero_term_on_err(3) for i in (1, 2, 3)] == [2, 2, 2]
    commit_c = c.raft(1).log.committed
    # (d) 1 goes down before its term-4 entry spread; 5 wins term 5 (votes of 2, 3, 4).
    c.rewrite = None
    c.heal()
    c.isolate(1)
    c.restart(5)
    c.drop = lambda m: m.frm == 5 and m.type is MessageType.APP
    c.members[5].node.campaign()  # loses term 4 (2, 3 voted for 1), learns the term
    c.process()
    c.elect(5)
    c.drop = None
    return c, commit_c


def test_5_4_2_entry_of_previous_term_is_not_committed_by_counting() -> None:
    c, commit = _figure_8(broken=False)
    assert commit == 2  # index 3 (term 2) is on 3 of 5 nodes but NOT committed
    # So when 5 (last term 3) wins and overwrites index 3, nothing committed is lost.
    c.tick(3)
    assert all(c.raft(i).log.term(3) == 3 for i in (2, 3, 4, 5))
    assert all(b"x" not in c.members[i].applied for i in c.members)


def test_5_4_2_broken_rule_would_lose_a_committed_entry() -> None:
    # The simulator's test hook commits by counting regardless of term: index 3 (term 2)
    # is "committed", yet node 5, whose index 3 has term 3, can still be elected and
    # would overwrite it: exactly the loss Figure 8 describes.
    c, commit = _figure_8(broken=True)
    assert commit == 3
    assert c.leader() == 5 and c.raft(5).log.term(3) == 3
