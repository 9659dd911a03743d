"""Raft simulator throughput: seeds per second with one process and with every core
(`nodeos-sim --jobs N`), and the events idle-tick skipping saves. Writes its section of
docs/benchmarks.md.

    python bench/sim_bench.py [--seeds 2000] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))  # nodeos_devtools, without the dev install too

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)

from nodeos_devtools.sim import SimConfig, run_seed  # noqa: E402

SECTION = "## Raft simulator throughput"


def cli_run(seeds: int, jobs: int) -> float:
    """Wall seconds for `nodeos-sim --seeds 1..N --jobs J` (exit 0 required)."""
    t0 = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeos_devtools.sim.cli",
            "--seeds",
            f"1..{seeds}",
            "--jobs",
            str(jobs),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), str(PROJECT / "tests" / "tooling")])},
    )
    if out.returncode != 0:
        raise SystemExit(f"simulator failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")
    return time.monotonic() - t0


def events(seeds: int, skip: bool) -> tuple[int, float]:
    """(events, CPU seconds) for seeds 1..N in this process."""
    t0 = time.process_time()
    total = 0
    for s in range(1, seeds + 1):
        res = run_seed(s, SimConfig(nodes=3, skip_idle_ticks=skip))
        assert res.ok, res.violation
        total += res.stats["events"]
    return total, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2000)
    add_no_write(ap)
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    one = cli_run(a.seeds, 1)
    many = cli_run(a.seeds, cores)
    sample = max(a.seeds // 10, 50)
    eager_ev, eager_cpu = events(sample, skip=False)
    skip_ev, skip_cpu = events(sample, skip=True)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    rate = a.seeds / many
    fewer = 100 * (eager_ev - skip_ev) / eager_ev
    per_seed = skip_cpu / sample
    cpu_min = 100_000 * per_seed / 60
    text = f"""{SECTION}

`python bench/sim_bench.py --seeds {a.seeds}` ({when}, {cores} cores, load average {load:.1f} at the
start: the host is shared, so wall times are upper bounds):

- `nodeos-sim --nodes 3 --seeds 1..{a.seeds}`: {one:.0f} s with `--jobs 1`, {many:.0f} s with
  `--jobs {cores}` ({rate:.0f} seeds/s); 100,000 seeds at that rate: {100_000 / rate / 60:.0f} min
- idle ticks skipped (seeds 1..{sample}, 3 nodes): {skip_ev:,} events instead of {eager_ev:,}
  ({fewer:.0f} % fewer); CPU {skip_cpu:.1f} s vs {eager_cpu:.1f} s — the due ticks still run
  (catch-up), so the saving is in queue traffic, not in Raft work
- CPU per 3-node seed: {1000 * per_seed:.0f} ms, so 100,000 seeds need {cpu_min:.0f} CPU-minutes:
  {cpu_min / cores:.0f} min on {cores} idle cores with `--jobs {cores}`
"""
    publish(SECTION, text, write=not a.no_write)


if __name__ == "__main__":
    main()
