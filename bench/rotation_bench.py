"""Cluster secret and CA rotation on 3 real daemons (loopback, mutual TLS): how long a roll takes,
and what writes see while rolls run back to back.

    .venv/bin/python bench/rotation_bench.py [--rolls 20] [--no-write]

A writer puts keys through a follower without pause, first with no roll (baseline), then while
`cluster.secret.rotate` runs `--rolls` times in a row on the other follower. Every put must be
acknowledged (a failed put is counted and shown). Figures go to docs/benchmarks.md, section
"Cluster secret rotation (loopback)". Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)

from nodeos.cluster.localcluster import LocalCluster, LocalNode  # noqa: E402
from nodeos.errors import NodeosError  # noqa: E402

SECTION = "## Cluster secret and CA rotation (loopback)"


class Writer(threading.Thread):
    def __init__(self, node: LocalNode) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.stop = threading.Event()
        self.lat: list[float] = []
        self.failed = 0

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                self.node.call("cluster.kv.put", {"key": f"w{i % 64}", "value": i}, timeout=30)
                self.lat.append(time.perf_counter() - t0)
            except NodeosError:
                self.failed += 1
            i += 1


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def phase(node: LocalNode, seconds: float | None, work: object = None) -> Writer:
    w = Writer(node)
    w.start()
    if seconds is not None:
        time.sleep(seconds)
    elif callable(work):
        work()
    w.stop.set()
    w.join()
    return w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rolls", type=int, default=20)
    add_no_write(ap)
    a = ap.parse_args()
    c = LocalCluster(Path(tempfile.mkdtemp(prefix="rotation-bench-")), 3)
    roll_s: list[float] = []
    ca_s: list[float] = []
    try:
        c.form()
        leader = c.leader()
        writer_node, roller = [n for n in c.nodes if n is not leader]

        def rolls() -> None:
            for _ in range(a.rolls):
                t0 = time.perf_counter()
                roller.call("cluster.secret.rotate", {}, timeout=60)
                roll_s.append(time.perf_counter() - t0)

        def ca_rolls() -> None:
            for _ in range(max(1, a.rolls // 4)):
                t0 = time.perf_counter()
                c.nodes[0].call("cluster.ca.rotate", {}, timeout=60)  # the CA's node: the first
                ca_s.append(time.perf_counter() - t0)

        during = phase(writer_node, None, rolls)
        during_ca = phase(writer_node, None, ca_rolls)
        base = phase(writer_node, max(2.0, sum(roll_s)))
        gen = roller.call("cluster.status")["secret"]["generation"]
    finally:
        c.stop()
    lines = [
        SECTION,
        "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by `bench/rotation_bench.py` on "
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs (shared host, other work "
        f"running): 3 `nodeosd --dataplane none` on loopback (mutual TLS), {a.rolls} rolls in a row "
        f"(`cluster rotate-secret` on a follower, forwarded to the leader; generation {gen} at the "
        "end), a writer putting keys through the other follower all along, then as long again with "
        "no roll.",
        "",
        "| | median | p99 | max |",
        "|---|---|---|---|",
        f"| one roll (stage, switch, stable) | {statistics.median(roll_s) * 1e3:.0f} ms | "
        f"{pct(roll_s, 0.99) * 1e3:.0f} ms | {max(roll_s) * 1e3:.0f} ms |",
        f"| one CA roll ({len(ca_s)} in a row, `cluster rotate-ca` on the CA's node) | "
        f"{statistics.median(ca_s) * 1e3:.0f} ms | {pct(ca_s, 0.99) * 1e3:.0f} ms | "
        f"{max(ca_s) * 1e3:.0f} ms |",
    ]
    for name, w in (
        ("put, secret rolls running", during),
        ("put, CA rolls running", during_ca),
        ("put, no roll", base),
    ):
        lines.append(
            f"| {name} ({len(w.lat)} puts, {w.failed} failed) | {statistics.median(w.lat) * 1e3:.1f} ms | "
            f"{pct(w.lat, 0.99) * 1e3:.1f} ms | {max(w.lat) * 1e3:.1f} ms |"
        )
    lines += [
        "",
        "A secret roll is two Raft commits and three rounds of requests to every member (a CA roll "
        "one more, and a key, a request and a certificate per member); members apply the "
        "map's step to their keys from a watcher that looks every 0.2 s, which bounds how fast a "
        "roll goes. Connections move to the new secret or certificate while the writes go on.",
        "",
    ]
    text = "\n".join(lines) + "\n"
    publish(SECTION, text, write=not a.no_write)


if __name__ == "__main__":
    main()
