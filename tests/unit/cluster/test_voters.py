"""The voter set the leader keeps (nodeos/cluster/voters.py): how many, on which domains, and
how it heals, checked as an operator would read `cluster status`: who votes and on which rack."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.raft import (
    ConfState,
    HardState,
    ProgressState,
    ProgressStatus,
    SoftState,
    StateRole,
    Status,
)
from nodeos.cluster.voter_keeper import VoterKeeper
from nodeos.cluster.voters import Member, Policy, check_policy_args, plan, policy_of
from nodeos.errors import BadInput

DEFAULT = Policy()


def members(
    racks: list[str | None], voters: set[int] | None = None, switch: list[str] | None = None
) -> list[Member]:
    """Members 1..N, member i on racks[i-1] (None: unlabelled)."""
    out = []
    for i, rack in enumerate(racks, start=1):
        labels = {} if rack is None else {"rack": rack}
        if switch is not None:
            labels["switch"] = switch[i - 1]
        out.append(Member(i, f"n{i}", labels, voter=i in (voters or {1})))
    return out


def settle(
    ms: list[Member], leader: int = 1, policy: Policy = DEFAULT, limit: int = 50
) -> tuple[list[Member], int, list[str]]:
    """Apply the plan's changes until there is none; (members, leader, changes made)."""
    done: list[str] = []
    for _ in range(limit):
        ch = plan(ms, leader, policy).change
        if ch is None:
            return ms, leader, done
        done.append(f"{ch.kind} {ch.node_id}")
        if ch.kind == "transfer":
            leader = ch.node_id
        else:
            ms = [replace(m, voter=(ch.kind == "promote")) if m.node_id == ch.node_id else m for m in ms]
    raise AssertionError(f"no fixed point after {limit} changes: {done}")


def voters_of(ms: list[Member]) -> list[int]:
    return sorted(m.node_id for m in ms if m.voter)


def racks_of(ms: list[Member]) -> list[str]:
    return sorted(m.labels.get("rack", "-") for m in ms if m.voter)


def lose(ms: list[Member], ids: set[int], silent_s: float = 60.0) -> list[Member]:
    return [replace(m, active=False, silent_s=silent_s) if m.node_id in ids else m for m in ms]


def back(ms: list[Member], ids: set[int]) -> list[Member]:
    return [replace(m, active=True, silent_s=0.0) if m.node_id in ids else m for m in ms]


def test_a_lone_node_is_its_one_voter() -> None:
    p = plan(members([None]), 1)
    assert p.change is None and p.target == 1 and p.level == "node"


def test_three_unlabelled_nodes_all_vote_and_two_do_too() -> None:
    ms, _, _ = settle(members([None, None, None]))
    assert voters_of(ms) == [1, 2, 3]
    ms, _, _ = settle(members([None, None]))
    assert voters_of(ms) == [1, 2]


def test_seven_members_keep_three_voters() -> None:
    ms, _, done = settle(members([None] * 7))
    assert voters_of(ms) == [1, 2, 3] and done == ["promote 2", "promote 3"]


def test_twelve_members_over_four_racks_vote_on_three_racks() -> None:
    racks = ["a", "a", "a", "b", "b", "b", "c", "c", "c", "d", "d", "d"]
    ms, _, _ = settle(members(racks))
    assert len(voters_of(ms)) == 3 and len(set(racks_of(ms))) == 3
    p = plan(ms, 1)
    assert p.level == "rack" and p.level_why == "spread by rack: 4 racks"
    assert all("the only voter there" in why for why in p.reasons.values())


def test_switches_come_before_racks_and_five_voters_when_asked() -> None:
    racks = [f"r{i}" for i in range(10)]
    switch = ["s1", "s1", "s2", "s2", "s3", "s3", "s4", "s4", "s5", "s5"]
    ms, _, _ = settle(members(racks, switch=switch), policy=Policy(voters=5))
    assert plan(ms, 1, Policy(voters=5)).level == "switch"
    assert len({m.labels["switch"] for m in ms if m.voter}) == 5
    # Lowered to 3: two demoted, never the leader; still on three switches.
    ms, leader, done = settle(ms)
    assert len(voters_of(ms)) == 3 and 1 in voters_of(ms) and leader == 1
    assert all(d.startswith("demote") for d in done)
    assert len({m.labels["switch"] for m in ms if m.voter}) == 3


def test_two_racks_fall_back_to_nodes_spread_over_both_racks() -> None:
    ms, _, _ = settle(members(["a", "a", "a", "b", "b", "b"]))
    p = plan(ms, 1)
    assert p.level == "node" and "2 labelled racks" in p.level_why
    assert racks_of(ms) in (["a", "a", "b"], ["a", "b", "b"])


def test_a_lost_voter_is_replaced_from_another_rack_first_then_demoted() -> None:
    racks = ["a", "a", "b", "b", "c", "c", "d", "d"]
    ms, _, _ = settle(members(racks))
    assert voters_of(ms) == [1, 3, 5]
    ms = lose(ms, {3})
    first = plan(ms, 1).change
    assert first is not None and first.kind == "promote"
    # From a rack no healthy voter holds, and not the lost voter's rack (it may go too).
    assert ms[first.node_id - 1].labels["rack"] == "d" and "node 3 silent for 60 s" in first.reason
    ms, _, done = settle(ms)
    assert done == [f"promote {first.node_id}", "demote 3"]
    assert 3 not in voters_of(ms) and len(set(racks_of(ms))) == 3
    # Back again: it stays a learner, nothing moves (no churn).
    assert plan(back(ms, {3}), 1).change is None


def test_a_voter_silent_below_the_bound_keeps_its_vote() -> None:
    ms, _, _ = settle(members(["a", "b", "c", "d"]))
    ms = lose(ms, {2}, silent_s=29.0)
    assert plan(ms, 1, Policy(down_after_s=30.0)).change is None
    assert plan(ms, 1, Policy(down_after_s=20.0)).change is not None


def test_no_replacement_means_the_lost_voter_stays() -> None:
    """Demoting it before a replacement is in would shrink the set below the target."""
    ms, _, _ = settle(members(["a", "b", "c"]))
    ms = lose(ms, {3})
    p = plan(ms, 1)
    assert p.change is None and p.lost == (3,)
    assert "to be replaced" in p.reasons[3]


def test_a_whole_rack_lost_squeezes_and_its_return_costs_one_swap() -> None:
    racks = ["a", "a", "b", "b", "c", "c"]
    ms, _, _ = settle(members(racks))
    assert racks_of(ms) == ["a", "b", "c"]
    ms = lose(ms, {5, 6})  # rack c
    ms, _, done = settle(ms)
    assert len(done) == 2 and racks_of(ms) in (["a", "a", "b"], ["a", "b", "b"])
    assert any("shared with voter" in why for why in plan(ms, 1).reasons.values())
    ms, _, done = settle(back(ms, {5, 6}))
    assert done[0] in ("promote 5", "promote 6") and done[1].startswith("demote") and len(done) == 2
    assert racks_of(ms) == ["a", "b", "c"]


def test_a_returning_rack_moves_nothing_when_voters_are_spread() -> None:
    racks = ["a", "b", "c", "d"]
    ms, _, _ = settle(members(racks))
    ms, _, _ = settle(lose(ms, {3}))
    assert 3 not in voters_of(ms)
    assert plan(back(ms, {3}), 1).change is None


def test_a_draining_leader_hands_over_and_is_then_replaced() -> None:
    ms, _, _ = settle(members(["a", "b", "c", "d"]))
    ms = [replace(m, draining=True) if m.node_id == 1 else m for m in ms]
    ms, leader, done = settle(ms)
    assert done == ["promote 4", "transfer 2", "demote 1"] and leader == 2
    assert voters_of(ms) == [2, 3, 4]


def test_a_draining_leader_hands_over_even_without_a_replacement() -> None:
    ms, _, _ = settle(members(["a", "b", "c"]))
    ms = [replace(m, draining=True) if m.node_id == 1 else m for m in ms]
    ch = plan(ms, 1).change
    assert ch is not None and ch.kind == "transfer" and ch.node_id in (2, 3)
    assert plan(ms, ch.node_id).change is None  # 1 keeps its vote: no one to take it


def test_a_learner_that_is_not_caught_up_or_silent_is_not_promoted() -> None:
    ms = members(["a", "b", "c"])
    ms = [replace(m, caught_up=False) if m.node_id == 2 else m for m in ms]
    ms = lose(ms, {3}, silent_s=1.0)
    assert plan(ms, 1).change is None


def test_nothing_changes_that_leaves_no_majority_in_contact() -> None:
    """5 voters with 3 out of contact (not yet past the bound): the leader has no quorum, and
    adding a sixth would need 4 of 6."""
    ms = members(["a", "b", "c", "d", "e", "f", "g"], voters={1, 2, 3, 4, 5})
    ms = lose(ms, {3, 4, 5}, silent_s=5.0)
    assert plan(ms, 1, Policy(voters=5)).change is None


def test_policy_arguments_are_checked() -> None:
    assert check_policy_args({"voters": 5}) == {"voters": 5}
    bad_args = (
        ({"voters": 4}, "voters"),
        ({"voters": "3"}, "voters"),
        ({"voter_down_s": 1}, "voter_down_s"),
        ({}, "setting"),
        ({"spread": 1}, "setting"),
    )
    for bad, field in bad_args:
        with pytest.raises(BadInput) as err:
            check_policy_args(bad)
        assert err.value.field == field


def test_cluster_set_is_a_map_command_and_bad_input_changes_nothing() -> None:
    m = ClusterMap()
    assert policy_of(m.state) == Policy()
    out = m.apply(1, encode_command("cluster_set", {"voters": 5}))
    assert out == {"result": {"voters": 5, "voter_down_s": 30.0}}
    out = m.apply(2, encode_command("cluster_set", {"voters": 7}))
    assert out["error"]["field"] == "voters" and out["error"]["allowed"] == [3, 5]
    assert policy_of(m.state) == Policy(voters=5)
    m.apply(3, encode_command("cluster_set", {"voter_down_s": 10}))
    assert policy_of(m.state) == Policy(voters=5, down_after_s=10.0)
    assert [e["kind"] for e in m.state["events"]["log"]] == ["voters_set", "voters_set"]


def _status(active: dict[int, bool], match: dict[int, int], commit: int = 100) -> Status:
    prog = {
        nid: ProgressStatus(match[nid], match[nid] + 1, ProgressState.REPLICATE, active[nid], False, 0)
        for nid in active
    }
    return Status(1, HardState(2, 1, commit), SoftState(1, StateRole.LEADER), commit, prog, 0, ConfState())


def test_the_keeper_counts_silence_from_its_own_election_and_replaces_after_the_bound() -> None:
    """What the driver runs each tick: a voter silent since before this leader was elected is
    replaced the bound after the election, by a caught-up learner, not by one far behind."""
    conf = ConfState((1, 2, 3), (4, 5))
    nodes = {n: {"name": f"n{n}", "labels": {"rack": r}} for n, r in zip(range(1, 6), "abcdd", strict=True)}
    k = VoterKeeper()
    k.became_leader(100.0)
    active = {1: True, 2: True, 3: False, 4: True, 5: True}
    match = {1: 100, 2: 100, 3: 10, 4: 100, 5: 20}  # 5 is 80 entries behind: not caught up
    policy = Policy(down_after_s=30.0)
    assert k.tick(_status(active, match), conf, nodes, policy, 129.0).change is None
    plan_ = k.tick(_status(active, match), conf, nodes, policy, 130.5)
    assert plan_.change is not None and (plan_.change.kind, plan_.change.node_id) == ("promote", 4)
    report = k.report(policy)
    assert report is not None and report["lost"] == [3] and report["next"]["node_id"] == 4
    # Heard from again before the bound: silence counts afresh.
    active[3] = True
    k.tick(_status(active, match), conf, nodes, policy, 131.0)
    active[3] = False
    assert k.tick(_status(active, match), conf, nodes, policy, 160.0).change is None
