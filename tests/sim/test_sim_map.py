"""The simulator's map workload: real map commands (decided by the control plane's code,
placed by the real placement package, reported by simulated agents) applied to every node's
own cluster map under the simulator's faults, with the map's state-machine checks; and
proof that those checks catch deliberately broken map and decision code."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from nodeos_devtools.sim import SimConfig, run_seed
from nodeos_devtools.sim.mapbroken import MAP_BROKEN_VARIANTS

# Timeouts are hang guards only: CI runs this tier at nice 19 beside the lab (tests/run.sh), where
# its wall time is several times its CPU time.
pytestmark = [pytest.mark.sim, pytest.mark.timeout(3000)]


def test_map_workload_seeds_no_violation() -> None:
    totals: dict[str, int] = {}
    for seed in range(1, 25):
        nodes = 5 if seed % 4 == 0 else 3
        res = run_seed(seed, SimConfig(nodes=nodes, workload="map"))
        assert res.ok, f"seed {seed} ({nodes} nodes): {res.violation}\n" + "\n".join(res.trace[-40:])
        for k, v in res.stats.items():
            totals[k] = totals.get(k, 0) + v
    # The runs reached what the checks are about: replicated volumes made ready by reports,
    # deleted and their names reused, failed creates (and creates a node failed, made
    # elsewhere), snapshots, clones, grants, refusals at the leader and at apply, snapshot
    # installs and restarts of the map, under crashes.
    for key in (
        "volumes_ready",
        "replicated_ready",
        "volumes_failed",
        "volumes_dropped",
        "snapshots_ready",
        "replicated_snapshots_ready",
        "clones",
        "grants",
        "map_refused",
        "map_rejected",
        "map_snapshot_checks",
        "map_restores",
        "crashes",
        "map_repeats",
        "creates_replaced",
    ):
        assert totals.get(key, 0) > 0, (key, totals)
    assert totals["map_applied"] > 1000, totals


def _no_digests(text: str) -> str:
    return re.sub(r"\b[0-9a-f]{16}\b", "…", text)


CAUGHT_BY = {
    "map_name_not_freed": "map invariant",
    "map_apply_clock": "map divergence",
    "map_apply_dict_order": "map divergence",
    "map_ready_early": "map invariant",
    "map_placement_ignores_spread": "placement",
    "map_grant_outlives_host": "map invariant",
    "map_restore_drops_snapshots": "map snapshot",
    "map_freeze_never_cleared": "map invariant",
    "map_create_ignores_room": "map invariant",
    "map_request_applied_twice": "map invariant",
    "map_create_replace_keeps_epoch": "map invariant",
    "map_index_misses_create_replace": "map invariant",
    "map_unlisted_ignores_reports": "map invariant",
    "map_command_untyped": "map invariant",
}


def test_every_broken_variant_has_its_expected_catch() -> None:
    assert set(CAUGHT_BY) == set(MAP_BROKEN_VARIANTS)


@pytest.mark.parametrize("variant", sorted(CAUGHT_BY))
def test_broken_map_variant_is_caught(variant: str) -> None:
    cfg = SimConfig(nodes=3, workload="map", broken=variant)
    for seed in range(1, 41):
        res = run_seed(seed, cfg)
        if not res.ok:
            assert res.violation is not None and res.violation.startswith(CAUGHT_BY[variant] + ":"), (
                res.violation
            )
            # The failure reproduces exactly (a clock read into the map differs run to run, and
            # so do the digests it gives: those are left out).
            again = run_seed(seed, cfg)
            assert again.violation is not None and again.time_ms == res.time_ms
            assert _no_digests(again.violation) == _no_digests(res.violation)
            return
    pytest.fail(f"broken map variant {variant!r} survived 40 seeds: the map checks are too weak")


def test_broken_variant_leaves_the_map_code_as_it_was() -> None:
    # The patch lasts one run: a clean run right after a broken one passes.
    assert not run_seed(1, SimConfig(nodes=3, workload="map", broken="map_ready_early")).ok
    assert run_seed(1, SimConfig(nodes=3, workload="map")).ok


def test_cli_map_workload_ok_and_failing_seed_reproduces() -> None:
    cmd = [sys.executable, "-m", "nodeos_devtools.sim.cli", "--workload", "map", "--quiet"]
    ok = subprocess.run([*cmd, "--seeds", "1..3"], capture_output=True, text=True, timeout=1200)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "no invariant violated" in ok.stdout and "volumes_ready=" in ok.stdout
    bad = subprocess.run(
        [*cmd, "--seeds", "1..7", "--broken", "map_create_ignores_room", "--trace-lines", "5"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "seed 7: INVARIANT VIOLATED" in bad.stdout and "overcommits pool" in bad.stdout
    assert "--workload map --broken map_create_ignores_room" in bad.stdout
