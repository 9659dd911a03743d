"""What /metrics costs: 3 real nodeosd processes on loopback (--dataplane none).

    .venv/bin/python bench/metrics_bench.py [--seconds 20] [--clients 4]

In one run, alternating phases of the same length with concurrent `cluster.kv.put` writers
through the leader (the commit path every map change, volume creates included, takes):
- no scraping;
- every node scraped every 5 s (a usual Prometheus interval);
- every node scraped every 0.1 s (50 times that: the cost made visible).
Reports commits/s per phase, and the scrape's own latency and size. Figures go to
docs/benchmarks.md, section "Metrics (loopback)". Not a pass/fail test. Volume creates and I/O
with and without scraping: bench/metrics_lab_bench.py (the lab).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from raft_bench import pct, throughput  # noqa: E402

from nodeos.cluster.localcluster import LocalCluster  # noqa: E402

SECTION = "## Metrics (loopback)"


def scrape(address: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body)


class Scraper:
    """Scrapes every node every `interval` seconds in a thread, like Prometheus would."""

    def __init__(self, addresses: list[str], interval: float) -> None:
        self.addresses, self.interval = addresses, interval
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            for a in self.addresses:
                self.latencies.append(scrape(a)[0])
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def __enter__(self) -> Scraper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def run(seconds: float, clients: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nodeos-metrics-bench-") as tmp:
        cluster = LocalCluster(Path(tmp), 3)
        try:
            cluster.form()
            leader = cluster.leader()
            addrs = [n.metrics_address for n in cluster.nodes]
            throughput(leader, clients, 2.0)  # warm-up
            phases: dict[str, list[float]] = {"none": [], "5s": [], "0.1s": []}
            scrape_lat: dict[str, list[float]] = {"5s": [], "0.1s": []}
            for _ in range(rounds):  # interleaved so drift of the machine hits every phase alike
                phases["none"].append(throughput(leader, clients, seconds)["commits_per_s"])
                for label, interval in (("5s", 5.0), ("0.1s", 0.1)):
                    with Scraper(addrs, interval) as s:
                        phases[label].append(throughput(leader, clients, seconds)["commits_per_s"])
                    scrape_lat[label].extend(s.latencies)
            idle = [scrape(leader.metrics_address) for _ in range(50)]
            follower = next(n for n in cluster.nodes if n is not leader)
            idle_f = [scrape(follower.metrics_address) for _ in range(50)]
        finally:
            cluster.stop()
    return {
        "phases": {k: sum(v) / len(v) for k, v in phases.items()},
        "spread": {k: (min(v), max(v)) for k, v in phases.items()},
        "scrape_under_load": {k: (pct(v, 50), pct(v, 99), len(v)) for k, v in scrape_lat.items()},
        "idle_leader": (pct([x for x, _ in idle], 50), pct([x for x, _ in idle], 99), idle[-1][1]),
        "idle_follower": (pct([x for x, _ in idle_f], 50), pct([x for x, _ in idle_f], 99), idle_f[-1][1]),
        "seconds": seconds,
        "clients": clients,
        "rounds": rounds,
    }


def render(r: dict[str, Any]) -> str:
    ph, sp = r["phases"], r["spread"]
    base = ph["none"]

    def rel(x: float) -> str:
        return f"{(x - base) / base * 100:+.1f} %" if base else "n/a"

    ms = 1000.0
    lines = [
        SECTION,
        "",
        f"`bench/metrics_bench.py`, {datetime.now(UTC):%Y-%m-%d}, {platform.node()} "
        f"({platform.processor() or platform.machine()}), 3 nodeosd on loopback, `--dataplane none`; "
        f"{r['clients']} writers through the leader, {r['rounds']} rounds of {r['seconds']:.0f} s per phase, "
        "phases interleaved in one run.",
        "",
        "| scraping (every node) | commits/s (mean) | rounds min-max | vs none |",
        "|---|---|---|---|",
        f"| none | {base:.0f} | {sp['none'][0]:.0f}-{sp['none'][1]:.0f} | |",
        f"| every 5 s | {ph['5s']:.0f} | {sp['5s'][0]:.0f}-{sp['5s'][1]:.0f} | {rel(ph['5s'])} |",
        f"| every 0.1 s (50x) | {ph['0.1s']:.0f} | {sp['0.1s'][0]:.0f}-{sp['0.1s'][1]:.0f} "
        f"| {rel(ph['0.1s'])} |",
        "",
        "A difference smaller than the spread between rounds of one phase is noise (the machine is "
        "shared and fsync-bound).",
        "",
        "| scrape of `/metrics` | p50 ms | p99 ms | size |",
        "|---|---|---|---|",
        f"| leader, idle | {r['idle_leader'][0] * ms:.1f} | {r['idle_leader'][1] * ms:.1f} | "
        f"{r['idle_leader'][2]} B |",
        f"| follower, idle | {r['idle_follower'][0] * ms:.1f} | {r['idle_follower'][1] * ms:.1f} | "
        f"{r['idle_follower'][2]} B |",
    ]
    for k, (p50, p99, n) in r["scrape_under_load"].items():
        lines.append(f"| under write load, every {k} ({n} scrapes) | {p50 * ms:.1f} | {p99 * ms:.1f} | |")
    lines += [
        "",
        "Volume creates and I/O with and without scraping, with a data plane: section *Metrics (lab, "
        "TCG)* (`bench/metrics_lab_bench.py`). A scrape reads the kernel's block counters of the node's "
        "volumes, not the I/O path.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    add_no_write(ap)
    args = ap.parse_args()
    text = render(run(args.seconds, args.clients, args.rounds))
    publish(SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
