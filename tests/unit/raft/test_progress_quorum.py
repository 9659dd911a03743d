"""Per-follower flow control (probe / replicate / snapshot) and majority arithmetic."""

from __future__ import annotations

from nodeos.cluster.raft import ProgressState
from nodeos.cluster.raft.progress import Inflights, Progress
from nodeos.cluster.raft.quorum import VoteResult, committed_index, vote_result


def test_committed_index_is_what_a_majority_has() -> None:
    match = {1: 10, 2: 7, 3: 3}
    assert committed_index({1, 2, 3}, match.__getitem__) == 7
    match5 = {1: 9, 2: 9, 3: 5, 4: 2, 5: 1}
    assert committed_index(set(match5), match5.__getitem__) == 5
    assert committed_index({1, 2}, {1: 4, 2: 2}.__getitem__) == 2  # even size: both needed
    assert committed_index(set(), lambda v: 0) == 0


def test_vote_result() -> None:
    voters = {1, 2, 3, 4, 5}
    assert vote_result(voters, {1: True, 2: True}) is VoteResult.PENDING
    assert vote_result(voters, {1: True, 2: True, 3: True}) is VoteResult.WON
    assert vote_result(voters, {1: True, 2: False, 3: False, 4: False}) is VoteResult.LOST


def test_inflight_window() -> None:
    w = Inflights(3)
    for i in (5, 9, 12):
        w.add(i)
    assert w.full()
    w.free_le(9)
    assert w.count() == 1 and not w.full()


def test_probe_sends_one_append_until_answered() -> None:
    p = Progress(next_index=11, inflight=4)
    assert p.state is ProgressState.PROBE and not p.is_paused()
    p.sent_entries(15)
    assert p.is_paused()
    # Rejected at 10 with the follower's last index 4 as hint: jump back, not one by one.
    assert p.maybe_decr_to(10, 4)
    assert p.next == 5 and not p.is_paused()
    assert not p.maybe_decr_to(10, 4)  # the same rejection again is stale


def test_replicate_pipelines_and_falls_back_on_rejection() -> None:
    p = Progress(next_index=5, inflight=2)
    p.maybe_update(4)
    p.become_replicate()
    p.sent_entries(6)
    p.sent_entries(8)
    assert p.next == 9 and p.is_paused()  # window of 2 full
    p.maybe_update(6)
    p.inflights.free_le(6)
    assert not p.is_paused()
    assert not p.maybe_decr_to(5, 5)  # older than match: stale
    assert p.maybe_decr_to(8, 6)
    assert p.next == 7


def test_snapshot_state_resumes_after_the_snapshot() -> None:
    p = Progress(next_index=3, inflight=2)
    p.become_snapshot(50)
    assert p.is_paused()
    p.become_probe()
    assert p.next == 51
