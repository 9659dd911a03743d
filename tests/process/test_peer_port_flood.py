"""A stranger floods a real nodeosd's TLS peer port with silent TCP connections (issue 25):
what an operator checks is that the daemon refuses the excess at once, lets go of the rest
quickly, gives back its file descriptors and memory, and that a real node still joins and
the cluster still works while the flood is on. The figures go to docs/benchmarks.md (run with
`-s` to see them); the bounds asserted here are loose on purpose."""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.localcluster import LocalNode
from nodeos.cluster.peerwire import ACCEPT_BATCH, MAX_HANDSHAKING, MAX_PENDING_PER_SOURCE
from tests.process.cluster_cli import cli, ok

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

FLOOD = 500
ATTACKER = "127.0.0.5"  # all of 127/8 is loopback: the stranger has an address of its own


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_silent(port: int, count: int, timeout: float = 20.0) -> list[socket.socket]:
    """`count` TCP connections from ATTACKER that never send a byte (non-blocking connects:
    the listener's backlog makes some wait for the kernel's SYN retry)."""
    pending: dict[int, socket.socket] = {}
    for _ in range(count):
        s = socket.socket()
        s.bind((ATTACKER, 0))
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        assert err in (0, errno.EINPROGRESS), os.strerror(err)
        pending[s.fileno()] = s
    done: list[socket.socket] = []
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        _, writable, _ = select.select([], list(pending), [], 0.5)
        for fd in writable:
            done.append(pending.pop(fd))
    done.extend(pending.values())  # never connected: counted as refused below
    return done


def refused(socks: list[socket.socket]) -> int:
    """Connections the daemon closed (reset or EOF) or never let in."""
    n = 0
    for s in socks:
        try:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                n += 1
                continue
            if s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                n += 1
        except BlockingIOError:
            pass  # still open, silent both ways
        except OSError:
            n += 1
    return n


def held_from(pid: int, addr: str) -> int:
    """TCP sockets the process holds whose remote end is `addr` (from /proc)."""
    mine = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    want = socket.inet_aton(addr)[::-1].hex().upper()  # /proc/net/tcp: little-endian hex
    n = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[2].split(":")[0] == want and cols[9] in mine:
            n += 1
    return n


def settle(pid: int, target: int, timeout: float = 60.0) -> tuple[int, float]:
    """Wait until the daemon holds at most `target` fds; (fds, seconds it took)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout and fds(pid) > target:
        time.sleep(0.2)
    return fds(pid), time.monotonic() - t0


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[LocalNode]]:
    made = [LocalNode(tmp_path, 1), LocalNode(tmp_path, 2)]
    for n in made:
        n.start()
    yield made
    for n in made:
        n.kill()


def test_a_flood_of_silent_connections_is_bounded_and_a_real_peer_still_joins(
    nodes: list[LocalNode],
) -> None:
    n1, n2 = nodes
    init = ok(cli(n1, "init", "--node-id", "1"))
    assert n1.proc is not None
    pid = n1.proc.pid
    time.sleep(1.0)
    base_rss = rss_mb(pid)
    figures: dict[str, Any] = {"baseline_rss_mb": round(base_rss, 1)}

    for round_ in (1, 2):
        base_fds = fds(pid)
        t0 = time.monotonic()
        socks = open_silent(n1.port, FLOOD)
        opened = time.monotonic() - t0
        # The excess is refused as soon as it is accepted (a burst waits in the listen backlog
        # first); of the stranger's connections the daemon holds at most the per-address cap
        # (and, for an instant, an accept batch it is closing).
        most_fds = most_held = 0
        while time.monotonic() - t0 < 1.5:
            most_fds, most_rss = max(most_fds, fds(pid)), rss_mb(pid)
            most_held = max(most_held, held_from(pid, ATTACKER))
            time.sleep(0.05)
        shut = refused(socks)
        while time.monotonic() - t0 < 30 and shut < FLOOD - MAX_PENDING_PER_SOURCE:
            time.sleep(0.2)
            shut = refused(socks)
        rounds = [v for k, v in figures.items() if k.startswith("round")]
        figures[f"round{round_}"] = r = {
            "fds_before": base_fds,
            "open_s": round(opened, 1),
            "refused": shut,
            "most_fds_during": most_fds,
            "most_held_from_stranger": most_held,
            "rss_during_mb": round(most_rss, 1),
        }
        r["fds_held"] = held = fds(pid)
        assert shut >= FLOOD - MAX_PENDING_PER_SOURCE, r
        # The daemon says why: over the per-address cap (`cluster status`, transport), most of
        # the flood (all but the cap, unless the burst outlasted a TLS timeout and freed slots).
        over = ok(cli(n1, "status"))["transport"]["over_source_cap"]
        r["over_source_cap"] = over - sum(f.get("over_source_cap", 0) for f in rounds)
        assert r["over_source_cap"] >= FLOOD // 2, r
        # Held: the cap's worth and a few of its own; at the burst's peak also what was accepted
        # but not yet closed (a few batches), far from an fd limit either way.
        assert held <= base_fds + MAX_PENDING_PER_SOURCE + 8, r
        assert most_fds <= base_fds + MAX_HANDSHAKING + 4 * ACCEPT_BATCH, r

        if round_ == 1:
            # A real node joins while the flood is on, and the cluster works.
            ok(cli(n2, "join", n1.address, "--token-file", "-", "--node-id", "2", stdin=init["token"]))
            ok(cli(n2, "kv", "put", "during-flood", "1"))
            assert ok(cli(n1, "kv", "get", "during-flood"))["value"] == "1"

        # The silent ones still open are let go of within seconds (not after asyncio's 30 s
        # SSL shutdown wait), and the fds come back.
        t1 = time.monotonic()
        while refused(socks) < len(socks) and time.monotonic() - t1 < 30:
            time.sleep(0.2)
        r["all_closed_by_daemon_s"] = round(time.monotonic() - t1, 1)
        assert refused(socks) == len(socks), r
        for s in socks:
            s.close()
        after_fds, _ = settle(pid, base_fds + 8)
        r["fds_after"], r["rss_after_mb"] = after_fds, round(rss_mb(pid), 1)
        assert after_fds <= base_fds + 8, r

    print("\npeer port flood:", json.dumps(figures, indent=1))
    # Memory stays flat: no per-connection buffers kept for a stranger (before: +150 MB).
    assert figures["round2"]["rss_after_mb"] - base_rss < 40, figures
