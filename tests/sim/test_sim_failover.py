"""The simulator's failover workload: leases renewed through the real Raft's read barrier, the
real failover controller and map, simulated agents following the map over a simulated data
plane, a host writing through whichever node it believes is the primary, under crashes,
partitions (the primary cut off, the leader and a primary in a minority, the cluster network
only), message loss and stalls and leader changes; and proof that each failover invariant
catches a deliberately broken variant."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nodeos.cluster.sim import run_seed
from nodeos.cluster.sim.cli import run_seeds
from nodeos.cluster.sim.failover_broken import FAILOVER_BROKEN_VARIANTS
from nodeos.cluster.sim.failover_sim import failover_config

# Timeouts are hang guards only: CI runs this tier at nice 19 beside the lab (tests/run.sh), where
# its wall time is several times its CPU time.
pytestmark = [pytest.mark.sim, pytest.mark.timeout(3000)]

# 1,000 seeds, as issue 9 asks: about 0.14 s of CPU per 3-node seed and 0.28 s per 5-node
# seed, run in two processes (the CLI's --jobs): ~75 s wall on the 2-core CI machine. The
# 100,000-seed run is in docs/benchmarks.md.
SEEDS_3 = range(1, 901)
SEEDS_5 = range(1, 101)
JOBS = 2


# ~170 s of CPU: on a host shared with VM labs (load 8-10) it took 8-10 min of wall time.
@pytest.mark.timeout(3000)
def test_failover_seeds_no_violation() -> None:
    totals: dict[str, int] = {}
    for nodes, seeds in ((3, SEEDS_3), (5, SEEDS_5)):
        for res in run_seeds(seeds, failover_config(nodes=nodes), JOBS):
            assert res.ok, f"seed {res.seed} ({nodes} nodes): {res.violation}\n" + "\n".join(res.trace[-60:])
            for k, v in res.stats.items():
                totals[k] = totals.get(k, 0) + v
    # The runs reached what the invariants are about: primaries called down and replaced,
    # nodes that fenced themselves, legs dropped and rebuilt, the host's writes acknowledged
    # and resubmitted on other paths, leader changes and crashes.
    for key in ("failovers", "fences", "demotions", "rebuilds", "host_acked", "host_resubmitted", "crashes"):
        assert totals.get(key, 0) > 0, (key, totals)
    assert totals["elections"] > len(SEEDS_3) + len(SEEDS_5), totals
    assert totals["failovers"] > 100, totals


def test_a_lease_request_to_a_leader_stepping_down_in_its_due_ticks_is_refused() -> None:
    # Seeds of the long run (docs/benchmarks.md) that raised ProposalDropped out of the read
    # barrier: the leader stepped down in the ticks caught up between its role check and it.
    assert run_seed(4684, failover_config(nodes=3)).ok
    assert run_seed(1761, failover_config(nodes=5)).ok


def test_a_timed_out_write_still_on_a_leg_never_lands_over_its_retrys_successor() -> None:
    # Seed 4646 of the long run (5 nodes): the host timed write v53 out while n4's leg write of
    # it to n5 was slow, retried it on a new connection to n4 (acknowledged), then wrote v63 to
    # the same block (acknowledged); the first v53 then landed on n5, in-sync, over v63. The
    # primary's md now serializes writes to a block per leg (serialize_policy): the retry's
    # leg write waits for the first one's, v63's for the retry's.
    assert run_seed(4646, failover_config(nodes=5)).ok
    assert not run_seed(4646, failover_config(nodes=5, broken="no_write_serialize")).ok


def test_a_legs_answer_from_before_the_primary_restarted_is_not_taken_for_a_newer_write() -> None:
    # Seed 2420 of the long run (5 nodes): a replica's ack of write id 6, sent 2.5 s before
    # every node restarted and stalled that long, reached the restarted primary, whose write
    # ids had started over: it counted for its new write 6, never written there ("acknowledged
    # write lost"). Answers now carry their connection (gen), unique across lives.
    assert run_seed(2420, failover_config(nodes=5)).ok


def test_a_candidate_of_an_old_term_winning_by_a_late_vote_is_no_violation() -> None:
    # Seed 57055 of the long run (3 nodes): n1 voted for n2 in term 2; the answer took 118 ms,
    # meanwhile n1 won term 3 with n3's vote and committed index 2; then n2, still a candidate of
    # term 2, counted n1's late vote and won term 2. Raft allows that leader (it can commit
    # nothing: every node that answers it is past term 2); the checker wanted it to hold an
    # entry committed in a later term. Now it holds a new leader to the entries committed in
    # earlier terms only (paper, Figure 3); voters that ignore the log are still caught by it
    # (tests/sim/test_sim.py, vote_ignores_log: 16 of seeds 1..40 before and after the change).
    assert run_seed(57055, failover_config(nodes=3)).ok


# variant -> (the invariant that catches it, nodes, first seed of the 80 tried)
CAUGHT_BY = {
    "no_lease_wait": ("two writable primaries", 3, 1),
    "promote_out_of_sync": ("acknowledged write lost", 3, 1),
    "no_self_fence": ("two writable primaries", 3, 1),
    "no_epoch_check": ("stale write", 3, 1),
    "ack_degraded": ("acknowledged write lost", 3, 1),
    "unfence_on_any_grant": ("two writable primaries", 3, 1),
    "ack_on_map_view": ("acknowledged write lost", 3, 1),
    "lost_contact_is_expiry": ("two writable primaries", 3, 1),
    # A ghost write needs a host timeout while the same block's leg write is slow: about one
    # 5-node seed in 6,000 (docs/benchmarks.md); 4646 is the first such seed of the long run.
    "no_write_serialize": ("acknowledged write lost", 5, 4646),
}


def test_every_broken_variant_has_its_expected_catch() -> None:
    assert set(CAUGHT_BY) == set(FAILOVER_BROKEN_VARIANTS)


@pytest.mark.parametrize("variant", sorted(CAUGHT_BY))
def test_broken_failover_variant_is_caught(variant: str) -> None:
    invariant, nodes, first = CAUGHT_BY[variant]
    cfg = failover_config(nodes=nodes, broken=variant)
    for seed in range(first, first + 80):
        res = run_seed(seed, cfg)
        if not res.ok:
            assert res.violation is not None and res.violation.startswith(invariant + ":"), res.violation
            again = run_seed(seed, cfg)  # the failure reproduces exactly
            assert (again.violation, again.time_ms) == (res.violation, res.time_ms)
            return
    pytest.fail(f"broken failover variant {variant!r} survived 80 seeds: the invariants are too weak")


def test_broken_variant_leaves_the_real_code_as_it_was() -> None:
    assert not run_seed(1, failover_config(broken="promote_out_of_sync")).ok
    assert run_seed(1, failover_config()).ok


def test_cli_failover_workload_ok_and_failing_seed_reproduces() -> None:
    cmd = [sys.executable, "-m", "nodeos.cluster.sim.cli", "--workload", "failover", "--quiet"]
    ok = subprocess.run([*cmd, "--seeds", "1..3"], capture_output=True, text=True, timeout=1200)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "no invariant violated" in ok.stdout and "failovers=" in ok.stdout
    bad = subprocess.run(
        [*cmd, "--seeds", "1..3", "--broken", "ack_degraded", "--trace-lines", "5"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "seed 1: INVARIANT VIOLATED" in bad.stdout and "acknowledged write lost" in bad.stdout
    assert "--workload failover --broken ack_degraded" in bad.stdout
    rate = subprocess.run(
        [*cmd, "--seeds", "1..3", "--broken", "ack_degraded", "--keep-going", "--trace-lines", "1"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert rate.returncode == 1, rate.stdout + rate.stderr
    assert "3 of 3 seeds (1..3), 3 nodes, violated an invariant" in rate.stdout
    assert "acknowledged write lost 3; seeds 1 2 3" in rate.stdout
