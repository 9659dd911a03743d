"""`nodeos-sim --nodes N --seeds FIRST..LAST [--workload map]`: run the simulator over a seed
range (`--workload map`: real cluster-map commands and the map's state-machine checks).

Exit 0 when no invariant broke on any seed; 1 with the seed, the violation and the
trace of the first failure otherwise (re-run that one seed to reproduce it exactly).
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import click

from .cluster import SeedResult, SimConfig, run_seed
from .epochbroken import EPOCH_BROKEN_VARIANTS
from .failover_broken import FAILOVER_BROKEN_VARIANTS
from .hooks import BROKEN_VARIANTS
from .mapbroken import MAP_BROKEN_VARIANTS
from .voters_broken import VOTERS_BROKEN_VARIANTS


def parse_seeds(text: str) -> range:
    try:
        if ".." in text:
            a, b = text.split("..", 1)
            first, last = int(a), int(b)
        else:
            first = last = int(text)
    except ValueError:
        raise click.BadParameter(
            "expected FIRST..LAST (e.g. 1..1000) or one seed", param_hint="--seeds"
        ) from None
    if first < 0 or last < first:
        raise click.BadParameter("expected 0 <= FIRST <= LAST", param_hint="--seeds")
    return range(first, last + 1)


_IN_SEED = False  # a pool worker's: a seed runs now


# A seed takes well under a second of CPU; these bound a stuck one (wall clock, generous for a
# worker at nice 19 beside a lab) so that it fails naming its seed, with the worker's stack,
# instead of holding the test until its 30-minute timeout (seen once in CI, not reproduced).
SEED_STACK_DUMP_S = 120.0
SEED_RESULT_BOUND_S = 300.0


class SeedStuck(RuntimeError):
    """No result from the pool within SEED_RESULT_BOUND_S."""


CHUNK = 8  # seeds per task of the pool


def _run_chunk(job: tuple[list[int], SimConfig]) -> list[SeedResult]:
    global _IN_SEED
    seeds, cfg = job
    _IN_SEED = True
    # The worker's stack on stderr if these seeds run past the bound: where it is stuck.
    faulthandler.dump_traceback_later(SEED_STACK_DUMP_S)
    try:
        return [run_seed(seed, cfg) for seed in seeds]
    finally:
        faulthandler.cancel_dump_traceback_later()
        _IN_SEED = False


def _on_sigterm(*_: object) -> None:
    # The pool terminates its workers (SIGTERM) when it ends, early once a failing seed is
    # found. A worker inside a seed exits through the seed's `finally`, which removes an
    # on-disk storage's files; an idle one at once: it waits for work inside the pool's queue
    # lock, and one that unwound from there left its sibling stuck on that lock and the pool's
    # join waiting for ever (seen once here, in `--jobs 0`).
    if _IN_SEED:
        sys.exit(1)
    os._exit(1)


def _exit_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)


def run_seeds(seeds: range, cfg: SimConfig, jobs: int) -> Iterator[SeedResult]:
    """Results in seed order; with jobs > 1 the seeds run in that many processes."""
    if jobs <= 1:
        for seed in seeds:
            yield run_seed(seed, cfg)
        return
    # Chunks of 8 keep the order close to seed order, so the first failure is found early.
    chunks = [list(seeds[i : i + CHUNK]) for i in range(0, len(seeds), CHUNK)]
    pool = multiprocessing.get_context("fork").Pool(jobs, initializer=_exit_on_sigterm)
    done = False
    try:
        results = pool.imap(_run_chunk, ((c, cfg) for c in chunks))
        for chunk in chunks:
            try:
                yield from results.next(timeout=SEED_RESULT_BOUND_S)
            except multiprocessing.TimeoutError:
                raise SeedStuck(
                    f"seeds {chunk[0]}..{chunk[-1]}: no result within {SEED_RESULT_BOUND_S:.0f} s "
                    f"(a worker's stack is on stderr past {SEED_STACK_DUMP_S:.0f} s); run them alone: "
                    f"--seeds {chunk[0]}..{chunk[-1]}"
                ) from None
        done = True
    finally:
        _end_pool(pool, done)


POOL_END_BOUND_S = 30.0


def _end_pool(pool: Any, done: bool) -> None:
    """Every seed answered: the workers are told to stop (close: each takes the end marker and
    exits); else they are terminated (SIGTERM). Either within POOL_END_BOUND_S, then killed.

    `with Pool(...)` terminates even after the last result; in CI a worker once stayed idle on
    the pool's queue lock after that SIGTERM, and the pool's join (so the run and its test)
    waited for ever (CI of 2026-11-30, a `--jobs 0` run: both processes asleep, no CPU for
    34 min)."""
    end = threading.Thread(
        target=(lambda: (pool.close(), pool.join())) if done else pool.terminate, daemon=True
    )
    end.start()
    end.join(POOL_END_BOUND_S)
    for p in multiprocessing.active_children():
        p.kill()
    end.join(POOL_END_BOUND_S)


@click.command()
@click.option(
    "--nodes",
    type=click.IntRange(1, 1000),
    default=3,
    show_default=True,
    help="cluster size (at most 9; 1,000 with --workload voters)",
)
@click.option("--seeds", "seeds_text", default="1..100", show_default=True, help="FIRST..LAST, inclusive")
@click.option(
    "--duration-ms",
    type=click.IntRange(100, 10**7),
    default=None,
    help="virtual time with faults per seed [default: 1500]",
)
@click.option(
    "--settle-ms",
    type=click.IntRange(500, 10**7),
    default=None,
    help="deadline after the faults stop for a final command to commit [default: 5000]",
)
@click.option(
    "--trace-lines",
    type=click.IntRange(0, 10**6),
    default=150,
    show_default=True,
    help="lines of the failing run's trace to print (0 = all)",
)
@click.option(
    "--broken",
    type=click.Choice(
        sorted(BROKEN_VARIANTS)
        + sorted(MAP_BROKEN_VARIANTS)
        + sorted(FAILOVER_BROKEN_VARIANTS)
        + sorted(EPOCH_BROKEN_VARIANTS)
        + sorted(VOTERS_BROKEN_VARIANTS)
    ),
    default=None,
    hidden=True,
    help="self-test: run a deliberately broken Raft (or, with --workload map or failover, map or failover) "
    "variant",
)
@click.option(
    "--workload",
    type=click.Choice(["opaque", "map", "failover", "voters"]),
    default="opaque",
    show_default=True,
    help="opaque commands (Raft only); real cluster-map commands decided by the control plane, "
    "applied to every node's map and checked after every apply; or failover: leases, the failover "
    "controller, simulated agents, a simulated data plane and a host (defaults: 5000 ms of faults, "
    "12000 ms to heal); or voters: many members on racks, the leader keeping few voters (voters_sim.py; "
    "defaults: 2000 ms of faults, 12000 ms for the heal, a rack lost and its return)",
)
@click.option(
    "--faults",
    type=click.Choice(["drain", "classic", "starved"]),
    default="drain",
    show_default=True,
    help="--workload failover: the fault mix (failover_faults.py); starved: starved nodes too (issue 29)",
)
@click.option(
    "--racks",
    type=click.IntRange(0, 1000),
    default=0,
    show_default=True,
    help="--workload voters: racks the members sit on (0: one per 25 members)",
)
@click.option(
    "--voters",
    type=click.Choice(["3", "5"]),
    default="3",
    show_default=True,
    help="--workload voters: the voters the leader keeps",
)
@click.option(
    "--max-events",
    type=click.IntRange(0, 10**9),
    default=0,
    show_default=True,
    help="events per seed before it counts as a livelock (0 = 100 per node per tick of virtual time)",
)
@click.option(
    "--jobs",
    type=click.IntRange(0, 256),
    default=1,
    show_default=True,
    help="processes running seeds in parallel (0 = one per core)",
)
@click.option(
    "--storage",
    type=click.Choice(["memory", "lmdb", "logfile"]),
    default="memory",
    show_default=True,
    help="the nodes' disks: MemoryStorage, or the daemon's log file / the LMDB storage, reopened "
    "after every crash",
)
@click.option(
    "--keep-going",
    is_flag=True,
    help="run every seed and count those that violate an invariant (a broken variant's catch rate); "
    "the first one's trace is printed",
)
@click.option("--quiet", is_flag=True, help="no progress line")
def main(
    nodes: int,
    seeds_text: str,
    duration_ms: int | None,
    settle_ms: int | None,
    trace_lines: int,
    broken: str | None,
    max_events: int,
    jobs: int,
    storage: str,
    workload: str,
    faults: str,
    racks: int,
    voters: str,
    keep_going: bool,
    quiet: bool,
) -> None:
    seeds = parse_seeds(seeds_text)
    if nodes > 9 and workload != "voters":
        raise click.BadParameter("at most 9 nodes (up to 1000 with --workload voters)", param_hint="--nodes")
    fo = workload == "failover"
    default_duration, default_settle = (
        (5000, 12000) if fo else (2000, 12000) if workload == "voters" else (1500, 5000)
    )
    duration_ms = duration_ms or default_duration
    settle_ms = settle_ms or default_settle
    extra: dict[str, Any] = {}
    if workload == "voters":
        from .voters_sim import voters_config

        extra = {**voters_config().__dict__, "racks": racks, "voters": int(voters)}
    cfg = SimConfig(
        **{
            **extra,
            "nodes": nodes,
            "duration_ms": duration_ms,
            "settle_ms": settle_ms,
            "broken": broken,
            "max_events": max_events,
            "storage": storage,
            "workload": workload,
            "failover_faults": faults,
        }
    )
    jobs = jobs or os.cpu_count() or 1
    t0 = time.monotonic()
    totals: dict[str, int] = {}
    failed: list[SeedResult] = []
    for i, res in enumerate(run_seeds(seeds, cfg, jobs)):
        for k, v in res.stats.items():
            totals[k] = totals.get(k, 0) + v
        if not res.ok:
            failed.append(res)
            if not keep_going:
                break
        if not quiet and (i + 1) % 100 == 0:
            click.echo(f"{i + 1}/{len(seeds)} seeds ok ({time.monotonic() - t0:.0f}s)", err=True)
    elapsed = time.monotonic() - t0
    if failed:
        res = failed[0]
        lines = res.trace if trace_lines == 0 else res.trace[-trace_lines:]
        click.echo("\n".join(lines))
        click.echo(f"\nseed {res.seed}: INVARIANT VIOLATED at {res.time_ms} ms: {res.violation}")
        click.echo(
            f"reproduce: nodeos-sim --nodes {nodes} --seeds {res.seed}..{res.seed}"
            + (f" --duration-ms {duration_ms}" if duration_ms != default_duration else "")
            + (f" --settle-ms {settle_ms}" if settle_ms != default_settle else "")
            + (f" --racks {racks} --voters {voters}" if workload == "voters" else "")
            + (f" --storage {storage}" if storage != "memory" else "")
            + (f" --workload {workload}" if workload != "opaque" else "")
            + (f" --faults {faults}" if faults != "drain" else "")
            + (f" --broken {broken}" if broken else "")
        )
        if keep_going:
            kinds: dict[str, int] = {}
            for r in failed:
                kind = (r.violation or "?").split(":", 1)[0]
                kinds[kind] = kinds.get(kind, 0) + 1
            click.echo(
                f"{len(failed)} of {len(seeds)} seeds ({seeds.start}..{seeds.stop - 1}), {nodes} nodes, "
                f"violated an invariant in {elapsed:.1f}s: "
                + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                + f"; seeds {' '.join(str(r.seed) for r in failed[:20])}{' ...' if len(failed) > 20 else ''}"
            )
        sys.exit(1)
    summary = ", ".join(f"{k}={v}" for k, v in sorted(totals.items()))
    click.echo(
        f"{len(seeds)} seeds ({seeds.start}..{seeds.stop - 1}), {nodes} nodes: no invariant violated "
        f"in {elapsed:.1f}s with {jobs} job{'s' if jobs > 1 else ''} [{summary}]"
    )


if __name__ == "__main__":
    main()
