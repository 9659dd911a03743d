"""Deliberately broken Raft variants, for the simulator's self-test only.

Each one switches a known-unsafe behaviour on, so tests can prove the invariant checks
catch real consensus bugs. Production code never sets these.
"""

from __future__ import annotations

from nodeos.cluster.raft.raft import Raft

from .raft_broken import RAFT_BROKEN_VARIANTS, break_raft

BROKEN_VARIANTS = {
    # Commit an entry of an earlier term by counting replicas (violates paper 5.4.2 / Fig. 8).
    "commit_stale_term": "leader commits entries of earlier terms by counting replicas",
    # Grant votes without the "candidate's log is at least as up to date" check (5.4.1).
    "vote_ignores_log": "voters ignore whether the candidate's log is up to date",
    # Send a Ready's messages before its entries and hard state are synced to disk.
    "send_before_sync": "messages leave before the Ready is persisted (crash loses promises)",
    # Pre-vote bugs (thesis 9.6): a pre-candidate bumps its real term; a voter adopts the
    # term of a pre-vote it receives. Both let a partitioned node disrupt the cluster.
    "pre_vote_bumps_term": "a pre-candidate increments its real term",
    "pre_vote_adopts_term": "a voter adopts the term of a pre-vote request",
    # One per safety invariant that had no variant of its own (raft_broken.py: the real
    # methods with one rule left out, bound on the instance; the Raft code keeps no flag).
    **RAFT_BROKEN_VARIANTS,
}


def apply_raft_hooks(raft: Raft, broken: str | None) -> None:
    if broken == "commit_stale_term":
        raft.test_commit_any_term = True
    elif broken == "vote_ignores_log":
        raft.test_vote_ignores_log = True
    elif broken == "pre_vote_bumps_term":
        raft.test_pre_vote_bumps_term = True
    elif broken == "pre_vote_adopts_term":
        raft.test_pre_vote_adopts_term = True
    elif broken in RAFT_BROKEN_VARIANTS:
        break_raft(raft, broken)
