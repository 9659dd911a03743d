"""Real nodeosd processes form a cluster on loopback; concurrent clients do register
reads/writes/CAS while leaders and followers are SIGKILLed and links are cut.

What an operator would check: the recorded history is linearizable (our checker, JSON-lines
format), and after every node is killed and restarted, every acknowledged write is there.
"""

from __future__ import annotations

import contextlib
import random
import signal
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.localcluster import LocalCluster, LocalNode
from nodeos.rpc import framing
from nodeos_devtools.lincheck import LINEARIZABLE, check_text
from nodeos_devtools.lincheck.record import HistoryRecorder

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]

KEYS = ["r0", "r1", "r2"]


class Unsent(Exception):
    """The request never left this client (daemon down): nothing happened."""


def api(node: LocalNode, method: str, params: dict[str, Any], timeout: float = 8.0) -> dict[str, Any]:
    """One raw API call; returns the reply map ({result} or {error: {code, ...}})."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(node.socket)
        except OSError as exc:
            raise Unsent(str(exc)) from None
        s.sendall(framing.pack(framing.request(1, method, params)))
        buf = b""
        while len(buf) < 4:
            chunk = s.recv(4 - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        (n,) = struct.unpack(">I", buf)
        body = b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            if not chunk:
                raise ConnectionError("closed")
            body += chunk
        return framing.unpack_body(body)
    finally:
        s.close()


# Errors after which the cluster certainly did nothing.
NOTHING_DONE = {"not_leader", "bad_input"}


class Client(threading.Thread):
    def __init__(self, proc: int, cluster: LocalCluster, rec: HistoryRecorder, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.cluster = cluster
        self.rec = rec
        self.stop_flag = stop
        self.rng = random.Random(proc)
        self.seq = 0
        self.acked_unique: dict[str, int] = {}
        self.counts = {"ok": 0, "fail": 0, "info": 0}
        self.last_seen: dict[str, Any] = {}

    def run(self) -> None:
        while not self.stop_flag.is_set():
            node = self.rng.choice(self.cluster.nodes)
            self.seq += 1
            r = self.rng.random()
            if r < 0.1:
                self.unique_put(node)
                continue
            key = self.rng.choice(KEYS)
            if r < 0.45:
                self.op(node, "read", key, None)
            elif r < 0.75:
                self.op(node, "write", key, self.proc * 1_000_000 + self.seq)
            else:
                expect = self.last_seen.get(key)
                self.op(node, "cas", key, [expect, self.proc * 1_000_000 + self.seq])

    def op(self, node: LocalNode, f: str, key: str, value: Any) -> None:
        method, params = {
            "read": ("cluster.kv.get", {"key": key}),
            "write": ("cluster.kv.put", {"key": key, "value": value}),
            "cas": (
                "cluster.kv.cas",
                {
                    "key": key,
                    "expect": value[0] if f == "cas" else None,
                    "value": value[1] if f == "cas" else value,
                },
            ),
        }[f]
        self.rec.invoke(self.proc, f, key, value)
        try:
            reply = api(node, method, params)
        except Unsent as exc:
            self.rec.aborted(self.proc, f, key, value, str(exc))
            self.counts["fail"] += 1
            time.sleep(0.05)  # that daemon is down: don't spin on it
            return
        except (OSError, ConnectionError, framing.FrameError):
            self.rec.info(self.proc, f, key, value)
            self.counts["info"] += 1
            self.proc += 1000  # like Jepsen: a process with an unknown op is replaced
            return
        if "error" in reply:
            code = (reply["error"] or {}).get("code")
            if code in NOTHING_DONE:
                self.rec.aborted(self.proc, f, key, value, str(code))
                self.counts["fail"] += 1
            else:
                self.rec.info(self.proc, f, key, value)
                self.counts["info"] += 1
                self.proc += 1000
            return
        res = reply["result"]
        if f == "read":
            self.last_seen[key] = res["value"]
            self.rec.ok(self.proc, f, key, res["value"])
        elif f == "write" or res["succeeded"]:
            self.rec.ok(self.proc, f, key, value)
        else:
            self.last_seen[key] = res["value"]
            self.rec.fail(self.proc, f, key, value)
        self.counts["ok"] += 1

    def unique_put(self, node: LocalNode) -> None:
        key = f"u-{self.proc % 1000}-{self.seq}"
        with contextlib.suppress(Unsent, OSError, ConnectionError, framing.FrameError):
            reply = api(node, "cluster.kv.put", {"key": key, "value": self.seq})
            if "result" in reply:
                self.acked_unique[key] = self.seq


def set_blocked(node: LocalNode, drop: list[int]) -> None:
    """Tell one node's transport to drop these peers; the fault must take, not be hoped for."""
    reply = api(node, "cluster.test.fault", {"drop": drop}, timeout=5)
    assert reply.get("result", {}).get("blocked") == sorted(drop), (
        f"n{node.raft_id} refused the fault: {reply}"
    )


def cut_off(cluster: LocalCluster, victim: LocalNode) -> None:
    others = [n for n in cluster.nodes if n is not victim]
    set_blocked(victim, [n.raft_id for n in others])
    for n in others:
        if n.running:
            set_blocked(n, [victim.raft_id])


def heal(cluster: LocalCluster) -> None:
    for n in cluster.nodes:
        if n.running:
            set_blocked(n, [])


def new_leader_without(cluster: LocalCluster, victim: LocalNode) -> LocalNode:
    """The fault took effect: the others elected a leader of their own."""
    others = [n for n in cluster.nodes if n is not victim and n.running]
    lead = cluster.leader(timeout=20, among=others)
    assert lead is not victim
    return lead


def nemesis(cluster: LocalCluster, duration: float, seed: int, log: list[str]) -> dict[str, int]:
    """A seeded fault schedule: kill the leader, kill a follower, isolate the leader or a follower.

    Returns how many faults of each kind were confirmed to have taken effect: a killed
    process is gone, a cut-off node's peers acknowledged the cut, and a leader killed or
    cut off was replaced by a leader among the others.
    """
    rng = random.Random(seed)
    end = time.monotonic() + duration
    took: dict[str, int] = {}
    while time.monotonic() < end:
        try:
            leader = cluster.leader(timeout=20)
        except TimeoutError:
            log.append("no leader (waiting)")
            continue
        followers = [n for n in cluster.nodes if n is not leader and n.running]
        action = rng.choice(["kill-leader", "kill-follower", "isolate-leader", "isolate-follower"])
        victim = leader if action.endswith("leader") or not followers else rng.choice(followers)
        log.append(f"{action} n{victim.raft_id}")
        if action.startswith("kill"):
            victim.kill(signal.SIGKILL)
            assert not victim.running, f"n{victim.raft_id} survived SIGKILL"
            if victim is leader:
                log.append(f"  n{new_leader_without(cluster, victim).raft_id} took over")
            time.sleep(rng.uniform(0.5, 2.0))  # fault duration (schedule, not a condition)
            victim.start()
        else:
            cut_off(cluster, victim)
            if victim is leader:
                log.append(f"  n{new_leader_without(cluster, victim).raft_id} took over")
            time.sleep(rng.uniform(1.0, 3.0))
            heal(cluster)
        took[action] = took.get(action, 0) + 1
        time.sleep(rng.uniform(0.3, 1.0))
    return took


def run_chaos(tmp_path: Path, size: int, clients: int, duration: float, seed: int) -> None:
    cluster = LocalCluster(tmp_path, size, voters=5 if size >= 5 else 3)  # every member votes
    history = tmp_path / "history.jsonl"
    try:
        cluster.form()
        stop = threading.Event()
        with HistoryRecorder(history) as rec:
            workers = [Client(p, cluster, rec, stop) for p in range(clients)]
            for w in workers:
                w.start()
            faults: list[str] = []
            took = nemesis(cluster, duration, seed, faults)
            # The schedule really faulted the cluster: kills and cuts, leaders among them.
            assert sum(took.values()) >= 4, (took, faults)
            assert took.keys() & {"kill-leader", "isolate-leader"}, (took, faults)
            assert took.keys() & {"kill-leader", "kill-follower"}, (took, faults)
            assert took.keys() & {"isolate-leader", "isolate-follower"}, (took, faults)
            heal(cluster)
            for n in cluster.nodes:
                if not n.running:
                    n.start()
            cluster.leader(timeout=30)
            stop.set()
            for w in workers:
                w.join(timeout=60)
            # Every node killed at once, then restarted: acknowledged writes must survive.
            for n in cluster.nodes:
                n.kill(signal.SIGKILL)
            for n in cluster.nodes:
                n.start()
            cluster.leader(timeout=30)
            reader = 10_000_000
            for key in KEYS:
                rec.invoke(reader, "read", key, None)
                reply = api(cluster.nodes[0], "cluster.kv.get", {"key": key}, timeout=30)
                assert "result" in reply, reply
                rec.ok(reader, "read", key, reply["result"]["value"])
        acked = {k: v for w in workers for k, v in w.acked_unique.items()}
        missing = []
        for key, value in acked.items():
            reply = api(cluster.nodes[-1], "cluster.kv.get", {"key": key, "timeout": 30}, timeout=35)
            if reply.get("result", {}).get("value") != value:
                missing.append((key, value, reply))
                if len(missing) >= 5:
                    break  # enough to fail clearly; don't wait 30 s on each of hundreds of keys
        ok_ops = sum(w.counts["ok"] for w in workers)
        assert ok_ops > 20, f"too few successful operations to mean anything: {[w.counts for w in workers]}"
        assert acked, "no acknowledged unique writes"
        assert not missing, f"acknowledged writes lost after restart: {missing[:5]} (faults: {faults})"
        result = check_text("register", history.read_text(), timeout=300)
        assert result.verdict == LINEARIZABLE, f"{result.verdict}: {result.detail}; faults: {faults}"
    except BaseException:
        for n in cluster.nodes:
            print(f"--- n{n.raft_id} log tail ---\n{n.log_tail(40)}")
        raise
    finally:
        cluster.stop()


def test_three_nodes_stay_linearizable_through_kills_and_partitions(tmp_path: Path) -> None:
    run_chaos(tmp_path, size=3, clients=4, duration=25, seed=3)


def test_five_nodes_stay_linearizable_through_kills_and_partitions(tmp_path: Path) -> None:
    run_chaos(tmp_path, size=5, clients=5, duration=25, seed=5)
