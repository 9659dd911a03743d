"""The simulator's worker pool always ends within its bound (tests/tooling/nodeos_devtools/sim/cli.py,
_end_pool): a pool whose end never returns (a worker left idle on the pool's queue lock, seen in
CI with `--jobs 0`: the run and its test waited for ever) has its workers killed instead."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from nodeos_devtools.sim import cli


def _sleep_for_ever() -> None:
    time.sleep(3600)


class StuckPool:
    """close/join/terminate as a pool whose worker never leaves: they wait until it is gone."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.closed = self.terminated = False

    def close(self) -> None:
        self.closed = True

    def join(self) -> None:
        self.worker.join()

    def terminate(self) -> None:
        self.terminated = True
        self.worker.join()


def test_a_pool_that_does_not_end_has_its_workers_killed_within_the_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(cli, "POOL_END_BOUND_S", 1.0)
    for done in (True, False):
        worker = multiprocessing.get_context("fork").Process(target=_sleep_for_ever, daemon=True)
        worker.start()
        pool = StuckPool(worker)
        t0 = time.monotonic()
        cli._end_pool(pool, done)
        assert time.monotonic() - t0 < 10
        assert not worker.is_alive() and worker.exitcode == -9
        # every seed answered: the workers are told to stop, never signalled first
        assert (pool.closed, pool.terminated) == ((True, False) if done else (False, True))


def test_a_whole_run_with_two_jobs_ends_and_leaves_no_worker() -> None:
    seeds = list(cli.run_seeds(range(1, 9), cli.SimConfig(nodes=3), jobs=2))
    assert len(seeds) == 8 and not multiprocessing.active_children()
