"""How fast a replicated volume moves on SPDK (issue 29; marker `spdk`): the cluster of
test_spdk_cluster.py (three real nodeosd, real nvmf_tgt on loopback), timed to the moment the
new primary's front end answers ANA optimized (polled every 20 ms on its target, not through the
console), each move checked by reading back through the new primary what was acknowledged before.

- unplanned: the primary's node lost (nodeosd and its target SIGKILLed), several times; each
  figure says whether the lost node also led the Raft group (then an election comes first), and
  the phases from the survivors' logs;
- planned: `node drain` of the primary's node while a host writes through it; the figure is the
  window in which no front end of the volume answered optimized, polled on both targets;
- a slow but live node is not called down: three CPU hogs beside the daemons for a while, and no
  failover nor `node_down` comes of it (the suspect grace holds).

Figures only: the one bound is on the mechanism (when the lost node is called down, from the logs),
not on the data plane's RPCs, which a loaded shared host stretches to seconds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any

import pytest

from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk.client import SpdkRpc

from . import test_spdk_cluster as cluster
from .conftest import stop_target
from .test_spdk_cluster import (
    H1,
    MIB,
    Node,
    _read,
    _storage_target,
    _wait_ready,
    _write,
)

nodes = cluster.nodes  # the cluster fixture: a cluster of this module's own

pytestmark = [pytest.mark.spdk, pytest.mark.timeout(1800)]
TRIALS = int(os.environ.get("NODEOS_FAILOVER_TRIALS", "4"))
DOWN_BOUND_S = 4.0  # the default lease's 2.4 s, plus a tick and a loaded daemon's slack
HOG_S = 20.0


def _optimized_after(n: Node, nqn: str, since: float, timeout: float = 120.0) -> float:
    """Seconds from `since` until `n`'s front end of `nqn` answers ANA optimized."""
    while time.monotonic() < since + timeout:
        front = n.target.dp.export_info(nqn)
        if front is not None and front.ana_state == "optimized":
            return time.monotonic() - since
        time.sleep(0.02)
    raise AssertionError(f"n{n.index} never optimized for {nqn}: {n.log_tail()}")


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
PHASES = (
    ("elected", re.compile(r"leader is now (\d+) \(term")),
    ("floor", re.compile(r"leases count from ([0-9.]+) s before")),
    ("down", re.compile(r"failover controller: node_health .*'health': 'down'")),
    ("failover", re.compile(r"failover controller: volume_failover")),
    ("promote", re.compile(r"promoting to primary")),
    ("optimized", re.compile(r"epoch \d+: front end optimized")),
    ("handoff", re.compile(r"failover controller: volume_handoff")),
    ("fenced", re.compile(r"front end inaccessible, handing off")),
    ("handed off", re.compile(r"writes drained: handed off")),
)


def _phase_times(live: list[Node], wall0: float) -> dict[str, float]:
    """The first line of each phase in the live nodes' logs after `wall0`, as seconds after it."""
    seen: dict[str, float] = {}
    for n in live:
        for line in (n.root / "nodeosd.log").read_text(errors="replace").splitlines():
            m = _STAMP.match(line)
            if not m:
                continue
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - wall0
            if t < 0:
                continue
            for name, pat in PHASES:
                if pat.search(line) and (name not in seen or t < seen[name]):
                    seen[name] = t
    return seen


def _phases(seen: dict[str, float]) -> str:
    return ", ".join(f"{k} {seen[k]:.2f}" for k, _ in PHASES if k in seen)


def _leader(n: Node) -> int:
    return int(n.ok("cluster", "status")["leader"])


def _other(nodes: list[Node], v: dict[str, Any]) -> tuple[Node, Node]:
    n1, n2 = nodes[:2]
    return (n1, n2) if v["primary"] == "n1" else (n2, n1)


@pytest.mark.timeout(2400)
def test_unplanned_failover_time_when_the_primarys_node_is_lost(nodes: list[Node]) -> None:
    n1, n3 = nodes[0], nodes[2]
    n1.ok("volume", "create", "v5", "--size", "64MiB", "--replicas", "2", "--timeout", "90")
    v = _wait_ready(n1, "v5")
    n1.ok("volume", "grant", "v5", "--host", H1)
    nqn = v["nqn"]
    data = os.urandom(4 * MIB)
    old, new = _other(nodes, v)
    _write(old, data, nqn)
    figures = []
    for trial in range(TRIALS):
        led = _leader(n3) == old.index
        time.sleep(1.0)  # renewals in their steady rhythm, as on a node that just died
        assert old.proc is not None
        wall0, t0 = time.time(), time.monotonic()
        old.proc.kill()
        stop_target(old.target, signal.SIGKILL)
        took = _optimized_after(new, nqn, t0)
        v = _moved(new, "v5", v["epoch"])
        assert _read(new, nqn, 4, f"speed-{trial}.bin") == data, "the new primary lost acknowledged data"
        times = _phase_times([new, n3], wall0)
        phases = _phases(times)
        figures.append((took, led))
        print(f"node lost ({'the leader' if led else 'not the leader'}): optimized on n{new.index} "
              f"{took:.2f} s later; phases: {phases}")  # fmt: skip
        # The mechanism, not the host: called down a lease after the loss, also when the lost node
        # led (the lease floor; before it an election plus a lease: 4.7-5.6 s, even at load 12).
        assert times.get("down", 99.0) < DOWN_BOUND_S, phases
        data = os.urandom(4 * MIB)
        _write(new, data, nqn)
        old.target = _storage_target(old.target.bin_dir, old.target.workdir.parent, old.index)
        old.start()
        v = _wait_ready(new, "v5", timeout=300)
        old, new = new, old
    print("node lost: " + ", ".join(f"{t:.2f} s{' (leader)' if led else ''}" for t, led in figures))
    n1.ok("volume", "revoke", "v5", "--host", H1)
    n1.ok("volume", "delete", "v5")


def _moved(n: Node, name: str, epoch: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rc, v = n.run("volume", "show", name)
        if rc == 0 and v["primary"] == f"n{n.index}" and v["epoch"] > epoch:
            return v  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise AssertionError(f"{name}: n{n.index} not primary past epoch {epoch}: {n.log_tail()}")


def test_a_slow_but_live_node_is_not_called_down(nodes: list[Node]) -> None:
    """Three CPU hogs (nice 0, as the daemons) on the two shared cores for HOG_S: renewals come
    late, but every Raft member answers, so nobody is called down and nothing fails over."""
    n1 = nodes[0]
    n1.ok("volume", "create", "v6", "--size", "64MiB", "--replicas", "2", "--timeout", "90")
    v = _wait_ready(n1, "v6")
    hog = f"import time\nend = time.monotonic() + {HOG_S}\nwhile time.monotonic() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(3)]
    try:
        for h in hogs:
            h.wait(timeout=HOG_S + 60)
    finally:
        for h in hogs:
            if h.poll() is None:
                h.kill()
    time.sleep(3)
    after = n1.ok("volume", "show", "v6")
    events = n1.ok("events", "--limit", "200") if n1.run("events", "--limit", "1")[0] == 0 else []
    kinds = [e.get("kind") for e in events] if isinstance(events, list) else []
    print(f"CPU hogs {HOG_S:.0f} s: node_suspect {kinds.count('node_suspect')}, node_down "
          f"{kinds.count('node_down')}, epoch {v['epoch']} -> {after['epoch']}")  # fmt: skip
    assert after["epoch"] == v["epoch"] and after["primary"] == v["primary"], (v, after)
    assert "node_down" not in kinds, kinds
    n1.ok("volume", "delete", "v6")


class AnaSampler:
    """Both nodes' front ends of one volume, read in turn on connections of its own (two RPCs a
    read: the namespace's ANA group, then the listener's state of that group) until stopped. Each
    read is kept as (node 0 or 1, sent, answered, optimized?): the state held at some moment between
    sent and answered (a target busy with the move answers late)."""

    def __init__(self, a: Node, b: Node, nqn: str) -> None:
        self.nqn = nqn
        self.rpcs = [SpdkRpc(str(a.target.sock), timeout=10), SpdkRpc(str(b.target.sock), timeout=10)]
        self.reads: list[tuple[int, float, float, bool]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _opt(self, rpc: SpdkRpc) -> bool:
        try:
            (sub,) = rpc.call("nvmf_get_subsystems", {"nqn": self.nqn})
            if not sub.get("namespaces"):
                return False  # between a namespace's removal and its return: nothing to reach
            grp = int(sub["namespaces"][0].get("anagrpid", 1))
            lst = rpc.call("nvmf_subsystem_get_listeners", {"nqn": self.nqn})
        except Exception:  # a target busy with the move: not optimized as far as a host knows
            return False
        return any(parse.listener_ana(e, grp) == "optimized" for e in lst or [])

    def _loop(self) -> None:
        while not self.stop.is_set():
            for i, rpc in enumerate(self.rpcs):
                sent = time.monotonic()
                opt = self._opt(rpc)
                self.reads.append((i, sent, time.monotonic(), opt))
            time.sleep(0.005)  # the targets serve the move too

    def wait_b(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(i == 1 and opt for i, _, _, opt in self.reads[-4:]):
            assert time.monotonic() < deadline, "the new primary never optimized"
            time.sleep(0.01)

    def gap(self) -> tuple[float, int]:
        """At most how long no front end was optimized: from the sending of the old one's last
        optimized read to the answer of the new one's first (and how many reads were made)."""
        self.stop.set()
        self.thread.join(timeout=10)
        for r in self.rpcs:
            r.close()
        first_b = next(r for r in self.reads if r[0] == 1 and r[3])
        a_opt = [r for r in self.reads if r[0] == 0 and r[3]]
        # Both at once only if the old one still said optimized to a read sent after the new one
        # said so.
        assert not [r for r in a_opt if r[1] > first_b[2]], "both front ends optimized at once"
        last_a = max((r for r in a_opt if r[1] < first_b[1]), key=lambda r: r[1], default=first_b)
        return first_b[2] - last_a[1], len(self.reads)


def test_planned_handoff_gap_of_a_drain(nodes: list[Node]) -> None:
    n1 = nodes[0]
    n1.ok("volume", "create", "v7", "--size", "64MiB", "--replicas", "2", "--timeout", "90")
    v = _wait_ready(n1, "v7")
    n1.ok("volume", "grant", "v7", "--host", H1)
    nqn = v["nqn"]
    old, new = _other(nodes, v)
    data = os.urandom(4 * MIB)
    _write(old, data, nqn)
    gaps = []
    for trial in range(TRIALS):
        sampler = AnaSampler(old, new, nqn)
        time.sleep(0.3)
        wall0 = time.time()
        old.ok("node", "drain", f"n{old.index}", "--no-wait")
        sampler.wait_b()
        gap, reads = sampler.gap()
        v = _moved(new, "v7", v["epoch"])
        assert _read(new, nqn, 4, f"handoff-{trial}.bin") == data, "the new primary lost acknowledged data"
        gaps.append(gap)
        phases = _phases(_phase_times([old, new, nodes[2]], wall0))
        print(f"drain of n{old.index}: no front end optimized for at most {gap:.3f} s "
              f"({reads} reads); phases: {phases}")  # fmt: skip
        # No bound on the gap: at load 12 the niced targets took seconds an RPC (a 12 s gap).
        data = os.urandom(4 * MIB)
        _write(new, data, nqn)
        old.ok("node", "undrain", f"n{old.index}")
        v = _wait_ready(new, "v7", timeout=300)
        old, new = new, old
    print("drain gaps: " + ", ".join(f"{g:.3f} s" for g in gaps))
    n1.ok("volume", "revoke", "v7", "--host", H1)
    n1.ok("volume", "delete", "v7")
