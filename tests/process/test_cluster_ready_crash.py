"""kill -9 at every step of a Raft Ready, on the leader and on a follower, while clients write.

The fast commit path sends a leader's appends before its own write, writes off the event loop
and skips the flush of a commit-index-only change. What an operator would check: every write
the cluster acknowledged is still there after each crash, and after every node is killed and
restarted. (Power loss, which also drops the page cache, is modelled by the simulator.)
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from pathlib import Path

import pytest

from nodeos.cluster.localcluster import LocalCluster, LocalNode
from nodeos.cluster.ready_crash import CRASH_FILE_ENV, READY_STEPS
from nodeos.rpc import framing
from tests.process.test_cluster_linearizable import Unsent, api

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]


class Writer(threading.Thread):
    """Puts unique keys through any running node; remembers what was acknowledged."""

    def __init__(self, name: str, cluster: LocalCluster, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.prefix = name
        self.cluster = cluster
        self.stop_flag = stop
        self.acked: dict[str, int] = {}

    def run(self) -> None:
        for seq in itertools.count():
            if self.stop_flag.is_set():
                return
            node = self.cluster.nodes[seq % len(self.cluster.nodes)]
            key = f"{self.prefix}-{seq}"
            with contextlib.suppress(Unsent, OSError, ConnectionError, framing.FrameError):
                reply = api(node, "cluster.kv.put", {"key": key, "value": seq, "timeout": 2.0}, timeout=5)
                if "result" in reply:
                    self.acked[key] = seq
                    continue
            time.sleep(0.02)  # that node is down or leaderless: don't spin on it


def crash_at(node: LocalNode, step: str, timeout: float = 30.0) -> None:
    """Arm the node's crash file and wait until the daemon died there."""
    crash_file = Path(node.env[CRASH_FILE_ENV])
    crash_file.write_text(step)
    assert node.proc is not None
    try:
        rc = node.proc.wait(timeout=timeout)
    finally:
        crash_file.unlink()
    assert rc == 137, f"n{node.raft_id} exited with {rc}, not at the injected crash: {node.log_tail()}"
    assert f"crash injected at raft ready step {step}" in node.log_tail(5)
    node.proc = None


def acked_count(writers: list[Writer]) -> int:
    return sum(len(w.acked) for w in writers)


def test_acknowledged_writes_survive_kill_9_at_every_step_of_a_ready(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 3)
    for n in cluster.nodes:
        n.env[CRASH_FILE_ENV] = str(tmp_path / f"crash-n{n.raft_id}")
    stop = threading.Event()
    writers = [Writer(f"w{i}", cluster, stop) for i in range(3)]
    try:
        cluster.form()
        for w in writers:
            w.start()
        for role, step in itertools.product(("leader", "follower"), READY_STEPS):
            leader = cluster.leader()
            victim = leader if role == "leader" else next(n for n in cluster.nodes if n is not leader)
            before = acked_count(writers)
            crash_at(victim, step)
            victim.start()
            # Writes go on being acknowledged after the crash (the cluster recovered).
            deadline = time.monotonic() + 30
            while acked_count(writers) < before + 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert acked_count(writers) >= before + 10, f"no progress after a crash of the {role} at {step}"
        stop.set()
        for w in writers:
            w.join(timeout=30)
        # Every node killed at once and restarted: nothing acknowledged may be lost.
        for n in cluster.nodes:
            n.kill(signal.SIGKILL)
        for n in cluster.nodes:
            n.start()
        cluster.leader(timeout=30)
        acked = {k: v for w in writers for k, v in w.acked.items()}
        assert len(acked) > 100, f"too few acknowledged writes to mean anything: {len(acked)}"
        missing = []
        for key, value in acked.items():
            reply = api(cluster.nodes[0], "cluster.kv.get", {"key": key, "timeout": 30}, timeout=35)
            if reply.get("result", {}).get("value") != value:
                missing.append((key, value, reply))
                if len(missing) >= 5:
                    break
        assert not missing, f"acknowledged writes lost: {missing}"
    except BaseException:
        for n in cluster.nodes:
            print(f"--- n{n.raft_id} log tail ---\n{n.log_tail(40)}")
        raise
    finally:
        stop.set()
        cluster.stop()
