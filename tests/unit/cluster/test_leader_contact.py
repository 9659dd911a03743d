"""A new leader's lease floor (nodeos/cluster/leader_contact.py, issue 29)."""

from __future__ import annotations

from nodeos.cluster.leader_contact import KEEP_TERMS, LeaderContact, lease_floor
from nodeos.storage import failover
from nodeos.storage.failover import Leases, LeaseTiming


def test_a_member_names_its_last_moment_with_a_leader_of_an_older_term() -> None:
    c = LeaderContact(started=10.0)
    assert c.last_before(5) == 10.0  # nothing heard this life: its start bounds the last one
    c.note(3, 12.0)
    c.note(4, 13.0)
    c.note(4, 12.5)  # an older moment never moves it back
    c.note(5, 20.0)  # the asking leader's own term does not count
    assert c.last_before(5) == 13.0
    assert c.last_before(4) == 12.0
    assert c.last_before(9) == 20.0


def test_old_terms_fold_into_one_moment_never_lost() -> None:
    c = LeaderContact(started=0.0)
    for term in range(1, KEEP_TERMS + 5):
        c.note(term, float(100 - term))  # the latest moment in the oldest term
    assert len(c.moments) == KEEP_TERMS
    assert c.last_before(KEEP_TERMS + 10) == 99.0


def test_the_floor_is_the_earliest_latest_moment_of_a_majority() -> None:
    voters = (1, 2, 3)
    assert lease_floor({1: 5.0}, voters) is None  # no majority yet
    assert lease_floor({1: 5.0, 2: 7.0}, voters) == 7.0
    assert lease_floor({1: 5.0, 2: 7.0, 3: 6.0}, voters) == 6.0  # majority {1, 3}
    assert lease_floor({1: 5.0, 4: 1.0}, voters) is None  # a learner's answer counts for nothing
    assert lease_floor({1: 1.0, 2: 2.0, 3: 3.0}, (1, 2, 3, 4, 5)) == 3.0
    assert lease_floor({}, ()) is None


def test_a_new_leader_calls_a_dead_node_down_a_lease_after_the_floor_not_after_its_election() -> None:
    t = LeaseTiming(2.0)
    st = {"nodes": {1: {}, 2: {}}, "volumes": {}, "reports": {}}
    ls = Leases(leader_since=100.0)
    ls.observe(st["nodes"], 100.0)
    early = 100.0 + t.down_after_s - 1.5
    assert not ls.expired(1, early, t)
    ls.floor = 98.0  # the voters last heard the old leader 2 s before this election
    assert ls.expired(1, early, t)
    assert "at least" in failover.lease_verdict(st, ls, 1, early, t)[1]
    ls.floor = 103.0  # never later than its own start
    assert ls.start() == 100.0
    ls.renewed(1, 101.0, t)  # a renewal this leader granted counts as always
    assert not ls.expired(1, 101.0 + t.down_after_s - 0.01, t)


def test_a_member_behind_the_asking_leaders_term_does_not_answer() -> None:
    # It could still acknowledge an older leader after answering (RaftDriver.contact_ago).
    from types import SimpleNamespace

    from nodeos.cluster.driver import RaftDriver

    me = SimpleNamespace(term=6, contact=LeaderContact(started=0.0))
    assert RaftDriver.contact_ago(me, 7) is None  # type: ignore[arg-type]
    me.term = 7
    ago = RaftDriver.contact_ago(me, 7)  # type: ignore[arg-type]
    assert ago is not None and ago > 0
