"""Cluster benchmark on loopback: 3 real nodeosd processes (--dataplane none).

    .venv/bin/python bench/raft_bench.py [--seconds 10] [--failovers 5] [--no-write]

Measures, through the leader's local API socket (what `nodeos cluster kv put` uses):
- the disk's own 4 KiB write + fdatasync p50/p99 and one synced Raft write (log file, LMDB);
- commit latency p50/p99 of `cluster.kv.put` with one client (a put returns once its entry is
  committed by a quorum, synced in LMDB on each node, and applied on the leader);
- commits/s with several concurrent clients;
- failover: time from SIGKILL of the leader until a write is acknowledged again, with a client
  writing continuously through a surviving node.
Figures go to docs/benchmarks.md, section "Cluster (loopback)". Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)

from nodeos.cluster.localcluster import LocalCluster, LocalNode  # noqa: E402
from nodeos.rpc import framing  # noqa: E402

SECTION = "## Cluster (loopback)"


class Conn:
    """One persistent API connection (requests in sequence)."""

    def __init__(self, node: LocalNode, timeout: float = 10.0) -> None:
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(node.socket)
        self.ids = 0

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        self.s.sendall(framing.pack(framing.request(self.ids, method, params)))
        (n,) = struct.unpack(">I", self._exact(4))
        return framing.unpack_body(self._exact(n))

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def close(self) -> None:
        self.s.close()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def latency(leader: LocalNode, seconds: float) -> dict[str, float]:
    c = Conn(leader)
    lat: list[float] = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        i += 1
        t0 = time.perf_counter()
        r = c.call("cluster.kv.put", {"key": "lat", "value": i})
        assert "result" in r, r
        lat.append(time.perf_counter() - t0)
    c.close()
    return {"n": len(lat), "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3}


def throughput(leader: LocalNode, clients: int, seconds: float) -> dict[str, float]:
    done = [0] * clients
    lat: list[list[float]] = [[] for _ in range(clients)]
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        c = Conn(leader)
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            r = c.call("cluster.kv.put", {"key": f"t{k}", "value": done[k]})
            if "result" in r:
                done[k] += 1
                lat[k].append(time.perf_counter() - t0)
        c.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    all_lat = [x for xs in lat for x in xs]
    return {
        "clients": clients,
        "commits_per_s": sum(done) / elapsed,
        "p50_ms": pct(all_lat, 50) * 1e3,
        "p99_ms": pct(all_lat, 99) * 1e3,
    }


def failover(cluster: LocalCluster) -> float:
    """Seconds from SIGKILL of the leader to the next acknowledged write via a survivor."""
    leader = cluster.leader()
    survivor = next(n for n in cluster.nodes if n is not leader)
    killed_at = time.monotonic()
    leader.kill(signal.SIGKILL)
    i = 0
    while True:
        i += 1
        try:
            c = Conn(survivor, timeout=5)
            r = c.call("cluster.kv.put", {"key": "fo", "value": i, "timeout": 1.0})
            c.close()
        except OSError:
            continue
        if "result" in r:
            took = time.monotonic() - killed_at
            break
    leader.start()
    cluster.wait_voters(len(cluster.nodes))
    return took


def fdatasync_probe(root: Path, n: int = 300) -> dict[str, float]:
    """The disk's own floor: 4 KiB write + fdatasync on the filesystem the nodes use."""
    path = root / "fdatasync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    lat: list[float] = []
    try:
        block = os.urandom(4096)
        for i in range(n):
            os.pwrite(fd, block, (i % 64) * 4096)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return {"n": n, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3}


def persist_probe(root: Path, kind: str, n: int = 200) -> dict[str, float]:
    """One synced Raft write (entry + hard state) on this disk, with the daemon's log file
    storage (one flush) or the LMDB one (two): the floor of each step."""
    from nodeos.cluster.raft import Entry, HardState
    from nodeos.cluster.raft_logfile import LogFileRaftStorage
    from nodeos.cluster.raft_storage import LmdbRaftStorage

    opener = LogFileRaftStorage.open if kind == "logfile" else LmdbRaftStorage.open
    st = opener(root / f"persist-probe-{kind}")
    lat: list[float] = []
    for i in range(1, n + 1):
        t0 = time.perf_counter()
        st.persist(HardState(1, 1, i), [Entry(1, i, data=b"x" * 100)], None)
        lat.append(time.perf_counter() - t0)
    st.close()
    return {"n": n, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3}


def render(r: dict[str, Any]) -> str:
    fs, ps, pl, lat = r["fdatasync"], r["persist"], r["persist_lmdb"], r["lat"]
    goal = 3 * fs["p99_ms"] + 2
    lines = [
        SECTION,
        "",
        f"Measured {r['when']} by `bench/raft_bench.py` on {r['host']} (shared 2-core host, other work "
        f"running): 3 `nodeosd --dataplane none` processes on 127.0.0.1, Raft tick {r['tick_ms']} ms "
        "(election timeout 10-20 ticks, heartbeat every tick, pre-vote and check-quorum on), "
        "client on the leader's API socket. The disk figures are taken in the same run, on the "
        "same filesystem, just before the cluster runs.",
        "",
        f"- the disk: 4 KiB write + `fdatasync`, {fs['n']} times: p50 {fs['p50_ms']:.2f} ms, "
        f"p99 {fs['p99_ms']:.2f} ms; one synced Raft write (entry + hard state) to the daemon's "
        f"log file (one flush): p50 {ps['p50_ms']:.2f} ms, p99 {ps['p99_ms']:.2f} ms; the same "
        f"write to the LMDB Raft store used before (two flushes: data, then meta page): "
        f"p50 {pl['p50_ms']:.2f} ms, p99 {pl['p99_ms']:.2f} ms.",
        f"- commit latency, 1 client, {lat['n']} puts: p50 {lat['p50_ms']:.1f} ms, "
        f"p99 {lat['p99_ms']:.1f} ms (goal: p99 <= 3 x fdatasync p99 + 2 ms = {goal:.1f} ms; "
        f"p99 is {lat['p99_ms'] / fs['p99_ms']:.1f} x the disk's fdatasync p99). A put costs the leader's "
        "and a follower's synced writes side by side (the leader sends its appends while its own "
        "write runs on its disk thread), one network round trip, and no flush for the commit index.",
        "",
        "| concurrent clients | commits/s | p50 latency | p99 latency |",
        "|---|---|---|---|",
    ]
    for t in r["tput"]:
        lines.append(
            f"| {t['clients']} | {t['commits_per_s']:.0f} | {t['p50_ms']:.1f} ms | {t['p99_ms']:.1f} ms |"
        )
    lines += [
        "",
        "Proposals that arrive while a write is running form the next write (group commit), so "
        "commits/s grow with clients while each write still costs one flush.",
    ]
    fo = r["failover"]
    lines += [
        "",
        f"- leader SIGKILL -> next acknowledged write through a survivor ({len(fo)} trials): "
        f"median {statistics.median(fo):.2f} s, min {min(fo):.2f} s, max {max(fo):.2f} s "
        f"(all: {', '.join(f'{x:.2f}' for x in fo)})",
        "",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--tick-ms", type=int, default=100)
    add_no_write(ap)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="raft-bench-"))
    cluster = LocalCluster(root, 3, tick_ms=a.tick_ms)
    try:
        cluster.form()
        leader = cluster.leader()
        r: dict[str, Any] = {
            "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "host": f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs",
            "tick_ms": a.tick_ms,
            "fdatasync": fdatasync_probe(root),
            "persist": persist_probe(root, "logfile"),
            "persist_lmdb": persist_probe(root, "lmdb"),
            "lat": latency(leader, a.seconds),
            "tput": [throughput(leader, c, a.seconds) for c in (1, 8, 32)],
            "failover": [failover(cluster) for _ in range(a.failovers)],
        }
    finally:
        cluster.stop()
    text = render(r)
    publish(SECTION, text, write=not a.no_write)


if __name__ == "__main__":
    main()
