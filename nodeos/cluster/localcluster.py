"""Several real nodeosd processes on one machine (loopback), for process tests and benchmarks.

Each node gets its own state dir, API socket and peer port, runs with `--dataplane none`
(a witness member: consensus only) and NODEOS_TEST_FAULTS=1 so tests can cut its links.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nodeos.errors import NodeosError
from nodeos.rpc.client import Client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PortTaken(RuntimeError):
    """The daemon exited because another socket holds one of its ports."""


class LocalNode:
    def __init__(self, root: Path, index: int, tick_ms: int = 100) -> None:
        self.root = root / f"n{index}"
        self.index = index
        self.raft_id = index  # tests choose small, readable ids
        self.port = free_port()
        self.metrics_port = free_port()  # /metrics of its own: nodes share one loopback address
        self.tick_ms = tick_ms
        self.env: dict[str, str] = {}  # extra environment for the daemon (e.g. crash injection)
        self.args: list[str] = []  # extra nodeosd arguments (e.g. --rest-listen)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_once = False

    @property
    def socket(self) -> str:
        return str(self.root / "api.sock")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_address(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    def start(self, timeout: float = 30.0) -> None:
        for attempt in range(3):
            try:
                self._start(timeout)
                self.started_once = True
                return
            except PortTaken:
                # free_port() let the port go before the daemon bound it, and another socket (an
                # outgoing connection's ephemeral port, often) took it meanwhile: take others,
                # unless the cluster already knows this node by its address.
                if attempt == 2 or self.started_once:
                    raise
                self.port, self.metrics_port = free_port(), free_port()

    def _start(self, timeout: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, NODEOS_TEST_FAULTS="1", NODEOS_RAFT_TICK_MS=str(self.tick_ms), **self.env)
        cmd = [
            sys.executable, "-m", "nodeos.daemon.main",
            "--state-dir", str(self.root / "state"),
            "--api-socket", self.socket,
            "--peer-listen", self.address,
            "--dataplane", "none",
            "--node-name", f"n{self.index}",
            "--storage-address", "127.0.0.2",
            "--metrics-listen", self.metrics_address,
            *self.args,
        ]  # fmt: skip
        log = open(self.root / "nodeosd.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc, tail = self.proc.returncode, self.log_tail()
                last = (tail.splitlines() or [""])[-1]
                err = PortTaken if rc == 2 and "is already in use" in last else RuntimeError
                raise err(f"nodeosd n{self.index} exited with {rc}: {tail}")
            with contextlib.suppress(NodeosError):
                Client(self.socket, timeout_s=2).call("daemon.ping")
                return
            time.sleep(0.05)
        raise RuntimeError(f"nodeosd n{self.index} did not answer within {timeout}s: {self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join((self.root / "nodeosd.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> Any:
        return Client(self.socket, timeout_s=timeout).call(method, params or {})


class LocalCluster:
    def __init__(self, root: Path, size: int, tick_ms: int = 100, voters: int = 3) -> None:
        """`voters`: how many the leader keeps (`cluster set voters`; the rest are learners)."""
        self.nodes = [LocalNode(root, i + 1, tick_ms) for i in range(size)]
        self.voters = voters

    def form(self) -> str:
        """Start every node, init on the first, join the rest; returns the join token."""
        for n in self.nodes:
            n.start()
        first = self.nodes[0]
        token = first.call("cluster.init", {"node_id": first.raft_id})["token"]
        if self.voters != 3:
            first.call("cluster.set", {"voters": self.voters})
        for n in self.nodes[1:]:
            params = {"address": first.address, "token": token, "node_id": n.raft_id}
            n.call("cluster.join", params, timeout=60)
        self.wait_voters(min(len(self.nodes), self.voters))
        return str(token)

    def by_id(self, raft_id: int) -> LocalNode:
        return next(n for n in self.nodes if n.raft_id == raft_id)

    def status(self, node: LocalNode) -> dict[str, Any] | None:
        try:
            return node.call("cluster.status", timeout=5)  # type: ignore[no-any-return]
        except NodeosError:
            return None

    def leader(self, timeout: float = 30.0, among: list[LocalNode] | None = None) -> LocalNode:
        """The node that a majority of the running nodes name as leader, and that agrees."""
        deadline = time.monotonic() + timeout
        nodes = among or self.nodes
        while time.monotonic() < deadline:
            for n in nodes:
                if not n.running:
                    continue
                st = self.status(n)
                if st and st.get("leader") and st["leader"] == st["node_id"]:
                    return n
            time.sleep(0.05)
        raise TimeoutError("no leader elected")

    def wait_voters(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                st = self.status(self.leader(timeout=5))
                if st and sum(1 for m in st["members"] if m["raft"] == "voter") >= count:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"the cluster did not reach {count} voters")

    def stop(self) -> None:
        for n in self.nodes:
            n.kill(signal.SIGTERM)
