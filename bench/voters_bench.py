"""Few voters, many members (issue 30): what a member costs the leader, on loopback and in the
simulator, side by side in one run.

    .venv/bin/python bench/voters_bench.py [--sizes 10,30] [--sim-sizes 100,300,1000] [--seconds 10]

Real processes (`nodeosd --dataplane none` on 127.0.0.1, two members a rack (3 members: one), 3 voters kept by
the leader, the rest learners), one cluster per size in turn, each beside a 3-member cluster:
- commit latency p50/p99 of `cluster.kv.put`, one client putting to each cluster's leader in
  turn (the 3-member figure measured at the same time, under the same host load);
- the leader's CPU per second of wall time meanwhile (utime + stime from /proc), and a learner's;
- heal time: a voter SIGKILLed (voter-down-after 3 s) until 3 voters on 3 racks are back.
The simulator's voters workload (1 seed each, 3 voters, 40 racks): wall time, events, and the
virtual time from a rack lost for good to the voter set whole again.
Figures go to docs/benchmarks.md, section "Voters and learners". Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))  # nodeos_devtools, without the dev install too

from benchdoc import add_no_write, publish  # noqa: E402
from raft_bench import Conn, pct  # noqa: E402

from nodeos.cluster.localcluster import LocalNode  # noqa: E402
from nodeos.errors import NodeosError  # noqa: E402
from nodeos_devtools.sim import run_seed  # noqa: E402
from nodeos_devtools.sim.voters_sim import voters_config  # noqa: E402

SECTION = "## Voters and learners"
IDLE_S = 5.0  # a quiet spell after the puts: what members cost the leader with no client
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def fsync_totals(n: LocalNode) -> tuple[float, float]:
    """(seconds, count) of the member's synced Raft writes so far, from its /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://{n.metrics_address}/metrics", timeout=10) as r:
        text = r.read().decode()
    vals = {}
    for line in text.splitlines():
        if line.startswith(("nodeos_cluster_fsync_seconds_sum", "nodeos_cluster_fsync_seconds_count")):
            name, value = line.rsplit(" ", 1)
            vals[name.split("{")[0].rsplit("_", 1)[1]] = float(value)
    return vals.get("sum", 0.0), vals.get("count", 0.0)


def leader_status(nodes: list[LocalNode]) -> dict[str, Any] | None:
    for n in nodes:
        if not n.running:
            continue
        try:
            st = n.call("cluster.status", timeout=10)
        except NodeosError:
            continue
        if st.get("leader") == st.get("node_id"):
            return dict(st)
    return None


def spread(st: dict[str, Any] | None, dead: set[int]) -> bool:
    if st is None:
        return False
    vs = [m for m in st["members"] if m["raft"] == "voter"]
    racks = {m["labels"].get("rack") for m in vs}
    return (
        len(vs) == min(3, len(st["members"]))
        and len(racks) == len(vs)
        and not {m["node_id"] for m in vs} & dead
    )


def wait_spread(nodes: list[LocalNode], dead: set[int], timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = leader_status(nodes) or st
        if st is not None and spread(st, dead):
            return st
        time.sleep(0.2)
    seen = st and [(m["node_id"], m["raft"], m["labels"]) for m in st["members"]]
    raise TimeoutError(f"voter set not spread within {timeout} s: {seen}")


def join(n: LocalNode, address: str, token: str) -> None:
    """A join whose outcome is unknown (the leader changed meanwhile) is asked again: the same
    node joining twice is taken once."""
    for attempt in range(5):
        try:
            n.call("cluster.join", {"address": address, "token": token, "node_id": n.raft_id}, timeout=120)
            return
        except NodeosError:
            if attempt == 4:
                raise
            time.sleep(2)


@contextlib.contextmanager
def formed(size: int) -> Iterator[tuple[list[LocalNode], dict[str, Any], float]]:
    """A cluster of `size` members, labelled two a rack (3 members: one), its voters spread:
    (nodes, the leader's status, seconds to get there)."""
    root = Path(tempfile.mkdtemp(prefix=f"voters-bench-{size}-"))
    nodes = [LocalNode(root, i) for i in range(1, size + 1)]
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: n.start(timeout=180), nodes))
        first = nodes[0]
        token = first.call("cluster.init", {"node_id": 1})["token"]
        first.call("cluster.set", {"voter_down_s": 3.0})
        for n in nodes[1:]:
            join(n, first.address, token)
        per_rack = 2 if size >= 6 else 1  # 3 members: a rack each, else there are not 3 racks
        for n in nodes:
            rack = f"r{(n.index - 1) // per_rack}"
            first.call("node.label", {"node": f"n{n.index}", "set": {"rack": rack}}, timeout=60)
        st = wait_spread(nodes, set())
        yield nodes, st, time.monotonic() - t0
    finally:
        for n in nodes:
            n.kill()


def messages(status: dict[str, Any]) -> int:
    t = status["transport"]
    return int(t["sent"]) + int(t["received"])


def leader_of(nodes: list[LocalNode], st: dict[str, Any]) -> LocalNode:
    return next(n for n in nodes if n.raft_id == st["leader"])


def one_size(size: int, base: tuple[list[LocalNode], dict[str, Any]], seconds: float) -> dict[str, Any]:
    """`size` members measured side by side with the 3-member cluster `base`: one put to each in
    turn, so both see the same load from the rest of the host."""
    with formed(size) as (nodes, st, formed_s):
        leader = leader_of(nodes, st)
        learner = next((n for n in nodes if n.raft_id not in st["voters"]["voters"]), None)
        assert leader.proc is not None
        pids = {"leader": leader.proc.pid, "learner": learner.proc.pid if learner and learner.proc else None}
        voter = next(n for n in nodes if n.raft_id in st["voters"]["voters"] and n is not leader)
        syncs = {"leader": leader, "voter": voter}
        syncs0 = {k: fsync_totals(n) for k, n in syncs.items()}
        before = {k: cpu_s(p) for k, p in pids.items() if p}
        s0 = leader.call("cluster.status", timeout=10)
        conns = {"big": Conn(leader), "base": Conn(leader_of(*base))}
        lat: dict[str, list[float]] = {"big": [], "base": []}
        w0 = time.monotonic()
        end = w0 + seconds
        i = 0
        while time.monotonic() < end:
            i += 1
            for k, c in conns.items():
                t1 = time.perf_counter()
                r = c.call("cluster.kv.put", {"key": "lat", "value": i})
                assert "result" in r, r
                lat[k].append(time.perf_counter() - t1)
        wall = time.monotonic() - w0
        for c in conns.values():
            c.close()
        cpu = {k: (cpu_s(p) - before[k]) / wall for k, p in pids.items() if p}
        s1 = leader.call("cluster.status", timeout=10)
        time.sleep(IDLE_S)
        s2 = leader.call("cluster.status", timeout=10)
        fsync_ms = {}
        for k, n in syncs.items():
            total, count = (a - b for a, b in zip(fsync_totals(n), syncs0[k], strict=True))
            fsync_ms[k] = total / count * 1e3 if count else 0.0
        victim = next(n for n in nodes if n.raft_id in st["voters"]["voters"] and n is not leader)
        victim.kill(signal.SIGKILL)
        t2 = time.monotonic()
        wait_spread(nodes, {victim.raft_id})
        return {
            "size": size,
            "formed_s": formed_s,
            "n": len(lat["big"]),
            "p50_ms": pct(lat["big"], 50) * 1e3,
            "p99_ms": pct(lat["big"], 99) * 1e3,
            "base_p50_ms": pct(lat["base"], 50) * 1e3,
            "base_p99_ms": pct(lat["base"], 99) * 1e3,
            "leader_cpu": cpu["leader"],
            "learner_cpu": cpu.get("learner"),
            "heal_s": time.monotonic() - t2,
            # The leader's peer messages (sent + received) per put, and per second with no client.
            "msgs_per_put": (messages(s1) - messages(s0)) / max(1, len(lat["big"])),
            "idle_msgs_s": (messages(s2) - messages(s1)) / IDLE_S,
            # Map writes that were not the client's (agents' reports, lease and voter changes),
            # per member and minute.
            "other_writes": (s2["commit"] - s0["commit"] - len(lat["big"])) / size / ((wall + IDLE_S) / 60),
            "fsync_ms": fsync_ms,
        }


def one_sim(members: int) -> dict[str, Any]:
    t0 = time.monotonic()
    res = run_seed(1, voters_config(nodes=members, racks=40, voters=3))
    wall = time.monotonic() - t0
    return {
        "members": members,
        "ok": res.ok,
        "violation": res.violation,
        "wall_s": wall,
        "events": res.stats.get("events", 0),
        "virtual_ms": res.time_ms,
        "rack_heal_ms": res.stats.get("rack_heal_ms"),
    }


def render(r: dict[str, Any]) -> str:
    lines = [
        SECTION,
        "",
        f"Measured {r['when']} by `bench/voters_bench.py` on {r['host']} (shared 2-core host, other "
        "work running). Real members: `nodeosd --dataplane none` on 127.0.0.1, Raft tick 100 ms, two "
        "members a rack (3 members: one), 3 voters kept by the leader (the rest learners). A "
        "3-member cluster stays up beside each bigger one and one client puts keys through each "
        "leader's API socket in turn (one to the big cluster, one to the 3-member cluster, ...), so "
        "both see the same load from the rest of the host; CPU is utime + stime per second of wall "
        "time while it does. Heal: a voter that is not the leader SIGKILLed with "
        "`cluster set voter-down-after 3`, until 3 voters on 3 racks are back (the bound, an "
        "election timeout of contact checks, a promotion and a demotion).",
        "",
        "| members | formed + labelled | puts | commit p50 | commit p99 | 3 members meanwhile p50 / p99 "
        "| leader CPU | a learner's CPU | synced write, leader / a voter (mean) | leader messages a put "
        "| leader messages/s idle | other map writes a member a minute | heal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r["procs"]:
        learner = "-" if p["learner_cpu"] is None else f"{p['learner_cpu'] * 100:.0f} %"
        lines.append(
            f"| {p['size']} | {p['formed_s']:.0f} s | {p['n']} | {p['p50_ms']:.1f} ms | {p['p99_ms']:.1f} ms "
            f"| {p['base_p50_ms']:.1f} / {p['base_p99_ms']:.1f} ms "
            f"| {p['leader_cpu'] * 100:.0f} % | {learner} "
            f"| {p['fsync_ms']['leader']:.1f} / {p['fsync_ms']['voter']:.1f} ms | {p['msgs_per_put']:.1f} "
            f"| {p['idle_msgs_s']:.0f} | {p['other_writes']:.2f} | {p['heal_s']:.1f} s |"
        )
    for p in r["procs"]:
        lines.append("")
        lines.append(
            f"- {p['size']} members against 3 at the same time: commit p50 "
            f"x{p['p50_ms'] / p['base_p50_ms']:.2f}, p99 x{p['p99_ms'] / p['base_p99_ms']:.2f}."
        )
    lines += [
        "",
        "The simulator's voters workload (`nodeos-sim --workload voters --racks 40`, one seed, 3 voters: "
        "2 s of faults, the heal, a voter's rack lost for good and its return; every Raft message an event):",
        "",
        "| members | wall time | events | virtual time | rack lost -> voter set whole (virtual) "
        "| invariants |",
        "|---|---|---|---|---|---|",
    ]
    for s in r["sims"]:
        lines.append(
            f"| {s['members']} | {s['wall_s']:.1f} s | {s['events']} | {s['virtual_ms']} ms "
            f"| {s['rack_heal_ms']} ms | {'held' if s['ok'] else s['violation']} |"
        )
    lines += [
        "",
        "Virtual time runs elections after 200-400 ms and calls a voter lost after 600 ms; the heal "
        "is that bound, the new leader's election when the rack held it, a promotion and a demotion. "
        "A seed's cost grows with the members because every heartbeat round is one message to and "
        "from each of them.",
        "",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,30", help="real member counts beside 3, comma-separated")
    ap.add_argument("--sim-sizes", default="100,300,1000", help="simulated member counts")
    ap.add_argument("--seconds", type=float, default=10.0)
    add_no_write(ap)
    a = ap.parse_args()
    r: dict[str, Any] = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs",
        "sims": [one_sim(int(s)) for s in a.sim_sizes.split(",") if s],
    }
    with formed(3) as (nodes, st, formed_s):
        r["base_formed_s"] = formed_s
        r["procs"] = [one_size(int(s), (nodes, st), a.seconds) for s in a.sizes.split(",")]
    publish(SECTION, render(r), write=not a.no_write)


if __name__ == "__main__":
    main()
