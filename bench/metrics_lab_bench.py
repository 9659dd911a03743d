"""What scraping /metrics costs a storage node with a data plane and I/O (VM lab, TCG).

    sudo flock /work/notes/lab.lock .venv/bin/python bench/metrics_lab_bench.py \\
        [--seconds 20] [--rounds 2] [--fast 0.5] [--no-write]

Boots its own lab (s1 with 2 drives and the kernel data plane, h1), makes a thin pool and a
volume exported to h1 over NVMe/TCP, then in one run alternates phases of the same length:
- no scraping;
- s1's /metrics scraped every 5 s (a usual Prometheus interval);
- scraped every --fast seconds (10x by default: the cost made visible).
Each phase measures, one after the other, volume create+delete cycles/s (a loop of API calls
in s1, each create waited until the volume is ready, as `nodeos volume create` waits) and fio
4 KiB random-write IOPS at QD 16 from h1 on the exported volume. Phases are interleaved in
every round, so the drift of a shared machine hits each alike. The scraper is curl in the lab's
namespace, through the TCP relay in s1 the lab tests use (tests/lab/metrics_helpers.py): its
few copies of each answer are counted in the scrape's cost. Figures go to docs/benchmarks.md,
section "Metrics (lab, TCG)": TCG emulates every guest instruction, so these are ratios
between phases of one run, not hardware figures. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))  # nodeos_devtools, without the dev install too

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from raft_bench import pct  # noqa: E402

from nodeos_devtools.lab import Lab  # noqa: E402
from tests.lab.dataplane_helpers import connect, device_of, disconnect  # noqa: E402
from tests.lab.metrics_helpers import scrape, start_relay, stop_relay, wait_scrapable  # noqa: E402
from tests.lab.node_helpers import ok, wait_daemon  # noqa: E402

SECTION = "## Metrics (lab, TCG)"
# Runs in s1: create+delete cycles through the API for argv[1] seconds, names prefixed argv[2].
CREATES = """
import json, sys, time
from nodeos.cli.node import await_ready
from nodeos.rpc.client import Client
c = Client("/run/nodeos/api.sock")
secs, prefix = float(sys.argv[1]), sys.argv[2]
t0 = time.monotonic(); n = 0
while time.monotonic() - t0 < secs:
    name = f"{prefix}{n}"
    c.call("volume.create", {"name": name, "size": 64 << 20, "pool": None, "replicas": 1, "spread": "node",
                             "qos_iops": None, "qos_mbps": None, "wait": 0})
    await_ready(c, name, 300.0, True)
    c.call("volume.delete", {"name": name, "force": False})
    n += 1
print(json.dumps({"cycles": n, "seconds": time.monotonic() - t0}))
"""


class Scraper:
    """GETs s1's /metrics every `interval` seconds in a thread, as Prometheus would."""

    def __init__(self, lab: Lab, target: str, interval: float | None) -> None:
        self.lab, self.target, self.interval = lab, target, interval
        self.latencies: list[float] = []
        self.size = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while self.interval is not None and not self.stop.is_set():
            t0 = time.monotonic()
            try:
                secs, self.size = scrape(self.lab, self.target)
                self.latencies.append(secs)
            except ConnectionError:
                self.latencies.append(float("inf"))
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def __enter__(self) -> Scraper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def fio_iops(lab: Lab, dev: str, seconds: float) -> float:
    r = lab.exec(
        "h1",
        ["fio", "--name=b", f"--filename={dev}", "--direct=1", "--ioengine=libaio", "--rw=randwrite",
         "--bs=4k", "--iodepth=16", "--size=128M", "--time_based", f"--runtime={int(seconds)}",
         "--ramp_time=2", "--output-format=json"],
        timeout=seconds + 300,
        check=True,
    )  # fmt: skip
    return float(json.loads(r.stdout[r.stdout.index("{") :])["jobs"][0]["write"]["iops"])


def creates_per_s(lab: Lab, seconds: float, prefix: str) -> float:
    r = lab.exec("s1", ["python3", "-c", CREATES, str(seconds), prefix], timeout=seconds + 600, check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return float(out["cycles"]) / float(out["seconds"])


def run(seconds: float, rounds: int, fast: float) -> dict[str, Any]:
    lab = Lab("bench-metrics")
    if lab.is_up():
        lab.down()
    t0 = time.monotonic()
    lab.up(storage=1, drives=2, hosts=1)
    try:
        wait_daemon(lab, "s1")
        nqn = lab.spec("h1").hostnqn
        ok(lab, "s1", "pool", "create", "bp1", "--drives", "all")
        ok(lab, "s1", "host", "add", nqn)
        ok(lab, "s1", "volume", "create", "bio", "--size", "256MiB")
        ok(lab, "s1", "volume", "grant", "bio", "--host", nqn)
        vol = ok(lab, "s1", "volume", "show", "bio")
        rc, text = connect(lab, "h1", "tcp", lab.addr("s1"), vol["nqn"])
        if rc != 0:
            raise RuntimeError(text)
        dev = device_of(lab, "h1", vol["nqn"])
        target = start_relay(lab, "s1")
        wait_scrapable(lab, target)
        fio_iops(lab, dev, 5)  # warm-up: the thin volume's first writes allocate
        phases = {"none": None, "5s": 5.0, f"{fast:g}s": fast}
        creates: dict[str, list[float]] = {k: [] for k in phases}
        iops: dict[str, list[float]] = {k: [] for k in phases}
        lat: dict[str, list[float]] = {k: [] for k in phases if phases[k]}
        size = 0
        for r in range(rounds):
            for label, interval in phases.items():
                with Scraper(lab, target, interval) as s:
                    creates[label].append(creates_per_s(lab, seconds, f"b{r}-{label.replace('.', '')}-"))
                    iops[label].append(fio_iops(lab, dev, seconds))
                if interval:
                    lat[label].extend(s.latencies)
                    size = s.size or size
                print(
                    f"round {r + 1} {label}: {creates[label][-1]:.3f} creates/s, {iops[label][-1]:.0f} IOPS"
                )
        stop_relay(lab, "s1")
        disconnect(lab, "h1", vol["nqn"])
        return {
            "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "accel": lab.status().get("accel"),
            "seconds": seconds,
            "rounds": rounds,
            "creates": creates,
            "iops": iops,
            "scrape": {k: (pct(v, 50), pct(v, 99), len(v)) for k, v in lat.items() if v},
            "size": size,
            "wall_s": round(time.monotonic() - t0),
        }
    finally:
        lab.down()


def render(r: dict[str, Any]) -> str:
    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    def row(label: str, what: str) -> str:
        xs, base = r[what][label], mean(r[what]["none"])
        ratio = "" if label == "none" else f"{mean(xs) / base:.2f}" if base else "n/a"
        fmt = ".3f" if what == "creates" else ".0f"
        return f"{mean(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}}) | {ratio}"

    lines = [
        SECTION,
        "",
        f"`bench/metrics_lab_bench.py`, {r['when']}, VM lab ({r['accel']}): s1 (2 drives, kernel data plane, "
        f"thin pool) and h1; {r['rounds']} rounds, each phase {r['seconds']:.0f} s of volume create+delete "
        f"cycles (API in s1, each create waited until ready) then {r['seconds']:.0f} s of fio 4 KiB random "
        "write QD 16 from h1 over NVMe/TCP; phases interleaved in one run; wall time "
        f"{r['wall_s']} s with the boot. Scraper: curl from the lab's namespace through the test relay "
        "in s1.",
        "",
        "| scraping s1's /metrics | create+delete cycles/s (min-max) | vs none | fio IOPS (min-max) "
        "| vs none |",
        "|---|---|---|---|---|",
    ]
    for label in r["creates"]:
        name = "none" if label == "none" else f"every {label[:-1]} s"
        lines.append(f"| {name} | {row(label, 'creates')} | {row(label, 'iops')} |")
    lines += ["", "| scrape under load | p50 ms | p99 ms | scrapes |", "|---|---|---|---|"]
    for label, (p50, p99, n) in r["scrape"].items():
        lines.append(f"| every {label[:-1]} s | {p50 * 1000:.0f} | {p99 * 1000:.0f} | {n} |")
    lines += [
        "",
        f"One scrape is {r['size']} B. TCG: ratios between phases of this run, not hardware figures; a "
        "difference within the min-max spread of a phase's rounds is noise.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fast", type=float, default=0.5, help="the faster scrape interval, seconds")
    add_no_write(ap)
    args = ap.parse_args()
    result = run(args.seconds, args.rounds, args.fast)
    print(json.dumps(result, default=str))
    text = render(result)
    publish(SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
