"""/metrics on a real nodeosd, probed as a stranger (issue 25): idle connections are closed
within seconds, the threads serving them stay bounded, a real scrape still works meanwhile;
and a wildcard peer address does not put /metrics on every address (the storage network's)."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from nodeos.cluster.localcluster import free_port
from nodeos.observe.httpd import IDLE_TIMEOUT_S, MAX_CONNECTIONS
from tests.process.conftest import Daemon

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
IDLE = 128


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def closed_by_server(s: socket.socket) -> bool:
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_connections_are_closed_and_threads_bounded_while_a_scrape_works(tmp_path: Path) -> None:
    port = free_port()
    d = Daemon(tmp_path, extra=["--metrics-listen", f"127.0.0.1:{port}"])
    d.start()
    try:
        assert d.proc is not None
        pid = d.proc.pid
        url = f"http://127.0.0.1:{port}/metrics"
        assert b"nodeos_build_info" in urllib.request.urlopen(url, timeout=10).read()
        base = threads(pid)
        t0 = time.monotonic()
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(IDLE)]
        time.sleep(1.0)
        during = threads(pid)
        # Beyond the bound the oldest are closed at once; the threads stay near the bound.
        assert sum(map(closed_by_server, idle)) >= IDLE - MAX_CONNECTIONS
        assert during <= base + MAX_CONNECTIONS + 4, (base, during)
        # A real scrape still works while the stranger's connections are open.
        assert b"nodeos_build_info" in urllib.request.urlopen(url, timeout=10).read()
        # The idle rest is closed by the daemon within its idle timeout (generous margin here).
        deadline = time.monotonic() + IDLE_TIMEOUT_S + 15
        while time.monotonic() < deadline and not all(map(closed_by_server, idle)):
            time.sleep(0.2)
        assert all(map(closed_by_server, idle))
        closed_s = time.monotonic() - t0
        for s in idle:
            s.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and threads(pid) > base + 1:
            time.sleep(0.2)
        assert threads(pid) <= base + 1
        print(f"\nmetrics: threads {base} -> {during} with {IDLE} idle; all closed after {closed_s:.1f} s")
    finally:
        d.stop()


def test_a_wildcard_peer_address_keeps_metrics_on_loopback(tmp_path: Path) -> None:
    d = Daemon(tmp_path, extra=["--peer-listen", f"0.0.0.0:{free_port()}"])
    d.start()
    try:
        obs = d.cli_json("status")["observe"]
        # Where it serves them, or (port 9810 taken on this host) where it tried: loopback.
        where = obs["metrics_url"] or obs["error"]
        assert "127.0.0.1:" in where and "0.0.0.0" not in where, obs
    finally:
        d.stop()
