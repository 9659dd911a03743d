"""The voters workload (tests/tooling/nodeos_devtools/sim/voters_sim.py): many members on 40 racks, the leader
keeping 3 or 5 voters with the daemon's own keeper, under crashes, partitions and whole racks
lost. Each seed checks the Raft invariants, that the set never shrinks below its target once
reached, that it is whole and spread over distinct racks within a bound after the heal and
after a rack is lost for good, and that the rack's return moves no vote. Broken on purpose
(promote any learner; demote the lost voter before its replacement is in) it fails.

A 1,000-member seed takes about 25 s on one core (every heartbeat round is 2,000 events of the
simulated network), so 1,000 members run one seed per voter count; 200 members run several."""

from __future__ import annotations

import pytest

from nodeos_devtools.sim import run_seed
from nodeos_devtools.sim.voters_broken import VOTERS_BROKEN_VARIANTS
from nodeos_devtools.sim.voters_sim import voters_config

pytestmark = [pytest.mark.sim, pytest.mark.timeout(3000)]


def _ok(members: int, voters: int, seed: int) -> dict[str, int]:
    res = run_seed(seed, voters_config(nodes=members, racks=40, voters=voters))
    assert res.ok, f"seed {seed}: {res.violation}\n" + "\n".join(res.trace[-60:])
    # The phases ran: the set grew from one voter, was healed after its rack was lost.
    assert res.stats["promotions"] >= voters and res.stats["demotions"] >= 1, res.stats
    assert "rack_heal_ms" in res.stats, res.stats
    return res.stats


@pytest.mark.parametrize("voters", [3, 5])
def test_two_hundred_members_keep_their_voters_spread_and_whole(voters: int) -> None:
    heal = [_ok(200, voters, seed)["rack_heal_ms"] for seed in range(1, 7)]
    assert max(heal) <= 3000, heal  # the bound the run checks itself, repeated for the reader


@pytest.mark.parametrize("voters", [3, 5])
def test_a_thousand_members_over_forty_racks(voters: int) -> None:
    _ok(1000, voters, seed=1)


def test_a_seed_replays_exactly() -> None:
    cfg = voters_config(nodes=100, racks=40)
    a, b = run_seed(7, cfg), run_seed(7, cfg)
    assert a.ok and (a.stats, a.time_ms) == (b.stats, b.time_ms)


# variant -> the invariant that catches it
CAUGHT = {
    "promote_any_learner": "voter set not whole",  # members 1, 2, 3 share rack r0
    "remove_before_add": "voter set shrank",
}


def test_every_voters_variant_is_accounted_for() -> None:
    assert set(CAUGHT) == set(VOTERS_BROKEN_VARIANTS)


@pytest.mark.parametrize("voters", [3, 5])
@pytest.mark.parametrize("variant", sorted(CAUGHT))
def test_broken_voter_rules_are_caught(variant: str, voters: int) -> None:
    cfg = voters_config(nodes=100, racks=40, voters=voters, broken=variant)
    for seed in range(1, 11):
        res = run_seed(seed, cfg)
        if not res.ok:
            assert res.violation is not None and res.violation.startswith(CAUGHT[variant] + ":"), (
                res.violation
            )
            return
    pytest.fail(f"broken variant {variant!r} survived 10 seeds: the voters invariants are too weak")
