"""The failover workload runs the product's own rules over a data plane configured as the product
configures it (issue 25): legs that block until the agent cuts them, deletes torn down in the
plan's order, nodeosd dying alone while its kernel serves on, several writes in flight per
volume. Each deliberately broken variant below (patched in for one run) must make it fail,
named by the check that catches it."""

from __future__ import annotations

import pytest

from nodeos.agent import legs, plan
from nodeos.agent.lease import LeaseKeeper
from nodeos.storage.failover import LeaseTiming
from nodeos_devtools.sim import run_seed, sim_kernel, sim_teardown
from nodeos_devtools.sim.failover_agent import SimFailoverAgent
from nodeos_devtools.sim.failover_sim import failover_config
from nodeos_devtools.sim.sim_md import Mirror
from nodeos_devtools.sim.sim_plane import TEARDOWN_BOUND_S

pytestmark = [pytest.mark.sim, pytest.mark.timeout(3000)]
N_SEEDS = 40


def _first_failure(nodes: int, seeds: range) -> tuple[int, str]:
    cfg = failover_config(nodes=nodes)
    for seed in seeds:
        res = run_seed(seed, cfg)
        if not res.ok:
            assert res.violation is not None
            again = run_seed(seed, cfg)  # the failure reproduces exactly
            assert (again.violation, again.time_ms) == (res.violation, res.time_ms)
            return seed, res.violation
    return 0, ""


def test_the_agents_call_the_products_rules() -> None:
    # No copies left in the simulated agent: the rules it uses are the product's objects.
    from nodeos_devtools.sim import sim_legs

    assert sim_legs.legs is legs
    assert sim_teardown.waits_for_primary is plan.waits_for_primary
    assert not hasattr(SimFailoverAgent, "_needed")
    keeper = sim_legs.new_keeper(LeaseTiming(1.0))
    assert isinstance(keeper, LeaseKeeper) and keeper.fenced  # a (re)started node starts fenced


def _one_leg_at_a_time_unbounded(m: Mirror, nids: list[int], now: float) -> bool:
    """The primary's delete before issue 25: each leg failed in md in turn, its loss unbounded,
    so md's superblock write for one failure waits on the next leg."""
    return all(m.cut_one_unbounded(nid, now) for nid in nids if m.legs[nid].ctrl is not None)


def test_old_delete_order_with_unbounded_one_at_a_time_cuts_hangs_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (a) secondaries remove their exports at once (the plan's wait returns None) and the
    # primary cuts its legs one at a time with unbounded loss: md's superblock write after the
    # first cut blocks on a leg whose export went, so md never stops.
    monkeypatch.setattr(sim_teardown, "waits_for_primary", lambda st, rec, me: None)
    monkeypatch.setattr(sim_teardown, "cut_legs", _one_leg_at_a_time_unbounded)
    seed, violation = _first_failure(3, range(1, 1 + N_SEEDS))
    assert seed, f"the old delete order survived {N_SEEDS} seeds"
    assert violation.startswith("teardown hung:"), violation
    assert f"bound {TEARDOWN_BOUND_S:.0f} s" in violation


def test_the_bounded_cut_is_what_keeps_a_teardown_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # The plan's order alone is not enough: a primary whose nodeosd died is down in the map, so
    # its secondaries go at once; back, it finds their exports gone and its unbounded cut wedges
    # (seed 16 since issue 29's faster controller and lease floor; seed 7 before). The one-round
    # bounded cut alone keeps every teardown within its bound, even in the old order.
    monkeypatch.setattr(sim_teardown, "cut_legs", _one_leg_at_a_time_unbounded)
    seed, violation = _first_failure(3, range(16, 17))
    assert seed == 16 and violation.startswith("teardown hung:"), violation
    monkeypatch.undo()
    monkeypatch.setattr(sim_teardown, "waits_for_primary", lambda st, rec, me: None)
    assert _first_failure(3, range(1, 11)) == (0, "")


def test_md_acknowledging_without_a_leg_the_map_counts_in_sync_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (b) a write completes while a leg the map counts in sync never got it.
    monkeypatch.setattr(sim_kernel, "reset_on_unanswered", sim_kernel.md_fails_leg)
    seed, violation = _first_failure(3, range(1, 1 + N_SEEDS))
    assert seed, f"md dropping legs on its own survived {N_SEEDS} seeds"
    assert violation.startswith("acknowledged write lost:"), violation
