"""The data plane watch against a REAL SPDK target killed under a running daemon (issue 10;
nodeos/node/dpwatch.py), marker `spdk`, skipped without NODEOS_SPDK_DIR (the reason given).

One real nodeosd on its own real nvmf_tgt (its drive an AIO bdev the target's JSON config
creates at start, as a production target's config attaches its NVMe drives): pool, volume, host
grant; a real initiator (spdk_dd, the granted host NQN) writes through the export. Then nvmf_tgt
is killed with SIGKILL: `nodeos status` says the data plane is down, the volume is not available.
nvmf_tgt is started again on the same socket, empty: without restarting nodeosd the export comes
back, the initiator reads back what it wrote, status is up, and `nodeos events` lists
dataplane_down and dataplane_up.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.node.dpwatch import BOUND_S

from .conftest import SpdkTarget, need_root, spdk_dir, start_target, stop_target
from .test_spdk_cluster import H1, MIB, Node, _dd

pytestmark = [pytest.mark.spdk, pytest.mark.timeout(600)]
WAIT_S = 90.0


def _target(bin_dir: Path, work: Path, img: Path) -> SpdkTarget:
    """nvmf_tgt whose config creates the drive at start (a restarted target has it again)."""
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "tgt.json"
    aio = {"name": "AIO1", "filename": str(img), "block_size": 4096}
    bdev = [{"method": "bdev_aio_create", "params": aio}, {"method": "bdev_wait_for_examine"}]
    cfg.write_text(json.dumps({"subsystems": [{"subsystem": "bdev", "config": bdev}]}))
    return start_target(bin_dir, work, ("--json", str(cfg)), nice=19)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    bin_dir = spdk_dir()
    need_root()
    work = tmp_path_factory.mktemp("spdk-dpwatch")
    img = work / "drive.img"
    with open(img, "wb") as fh:
        fh.truncate(256 * MIB)
    n = Node(1, work / "n1", _target(bin_dir, work / "t1", img), "127.0.0.2", drive="AIO1")
    n.img = img  # type: ignore[attr-defined]
    n.bin_dir = bin_dir  # type: ignore[attr-defined]
    n.root.mkdir(parents=True)
    # systemd's notify socket, ours: what `systemctl status nodeosd` would show as its status
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(work / "notify.sock"))
    notify.setblocking(False)
    n.notify = notify  # type: ignore[attr-defined]
    os.environ["NOTIFY_SOCKET"] = str(work / "notify.sock")
    try:
        n.start()
        del os.environ["NOTIFY_SOCKET"]  # only the daemon's; the console must not notify
        n.ok("cluster", "init", "--node-id", "1")
        n.ok("pool", "create", "p1", "--drives", n.drive, "--node", "n1")
        n.ok("host", "add", H1)
        yield n
    finally:
        os.environ.pop("NOTIFY_SOCKET", None)
        notify.close()
        if n.proc is not None and n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait(timeout=30)
        stop_target(n.target, signal.SIGKILL)


def _wait(what: str, cond: Any, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.5)


def _health(n: Node) -> dict[str, Any]:
    return dict(n.ok("status")["node"]["dataplane_health"])


def _unit_status(n: Node) -> str:
    """The last STATUS= the daemon sent to systemd (empty if none since the last call)."""
    last = ""
    while True:
        try:
            msg = n.notify.recv(4096).decode()  # type: ignore[attr-defined]
        except BlockingIOError:
            return last
        for line in msg.splitlines():
            if line.startswith("STATUS="):
                last = line.removeprefix("STATUS=")


def _events(n: Node, kind: str) -> list[dict[str, Any]]:
    return [e for e in n.ok("events")["events"] if e["kind"] == kind]


def test_a_killed_spdk_target_is_reported_and_reexported_when_it_returns(node: Node) -> None:
    n = node
    n.ok("volume", "create", "v1", "--size", "16MiB", "--timeout", "90")
    _wait("v1 ready", lambda: n.ok("volume", "show", "v1")["state"] == "ready")
    n.ok("volume", "grant", "v1", "--host", H1)
    nqn = n.ok("volume", "show", "v1")["nqn"]
    data = os.urandom(4 * MIB)
    (n.root / "src.bin").write_bytes(data)
    _dd(n, nqn, n.addr, "4420", "--if", str(n.root / "src.bin"), "--ob", "Fn1")
    assert _health(n)["state"] == "up" and not _events(n, "dataplane_down")

    # Stamped before the kill: a niced target with 1 GiB to unmap can take seconds to exit, and
    # the watch may see its socket refuse before wait() returns (since 1.5-2.2 s before it, here).
    killed = time.time()
    n.target.proc.kill()  # SIGKILL: no clean shutdown, the socket file stays behind
    n.target.proc.wait(timeout=30)
    _wait("status says the data plane is down", lambda: _health(n)["state"] == "down", timeout=60)
    detected = time.time()
    h = _health(n)
    assert "SPDK" in h["reason"] and killed - 1 <= h["since"] <= killed + BOUND_S, (h, killed)
    vol = n.ok("volume", "show", "v1")
    assert vol["available"] is False and "data plane" in vol["unavailable"], vol
    _wait("the event log says down", lambda: _events(n, "dataplane_down"), timeout=60)
    seen: list[str] = []
    _wait("systemd's status line says DOWN", lambda: "DOWN" in (seen.append(_unit_status(n)) or seen[-1]))
    assert seen[-1].startswith("degraded:") and "SPDK" in seen[-1], seen

    stop_target(n.target)
    n.target = _target(n.bin_dir, n.target.workdir, n.img)  # type: ignore[attr-defined]
    _wait("the export is back", lambda: n.target.dp.export_info(nqn) is not None)
    _wait("status says up", lambda: _health(n)["state"] == "up", timeout=60)
    _wait("the event log says up", lambda: _events(n, "dataplane_up"), timeout=60)
    _wait("v1 available again", lambda: n.ok("volume", "show", "v1")["available"] is True, timeout=60)
    _wait(
        "systemd's status line says ready",
        lambda: (seen.append(_unit_status(n)) or seen[-1]).startswith("ready:"),
    )
    out = n.root / "back.bin"
    _dd(n, nqn, n.addr, "4420", "--ib", "Fn1", "--of", str(out), "--count", "4")
    assert out.read_bytes() == data
    since = h["since"] - killed
    print(f"SPDK killed: status read down {detected - killed:.1f} s after (since {since:+.1f} s)")


def test_a_target_restarted_at_once_is_reported_and_reexported(node: Node) -> None:
    """Killed and started again at once (a supervisor restarting it): the new target is empty.
    The socket's new inode tells the watch; the down and up are in the event log all the same."""
    n = node
    nqn = n.ok("volume", "show", "v1")["nqn"]
    log_at = len((n.root / "nodeosd.log").read_text(errors="replace"))
    downs = len(_events(n, "dataplane_down"))
    ups = len(_events(n, "dataplane_up"))
    n.target.proc.kill()
    n.target.proc.wait(timeout=30)
    stop_target(n.target)
    n.target = _target(n.bin_dir, n.target.workdir, n.img)  # type: ignore[attr-defined]
    _wait("the event log says down", lambda: len(_events(n, "dataplane_down")) > downs, timeout=60)
    _wait("the export is back", lambda: n.target.dp.export_info(nqn) is not None)
    _wait("the event log says up", lambda: len(_events(n, "dataplane_up")) > ups, timeout=60)
    assert _health(n)["state"] == "up"
    # Re-exported at the first try: the new target's transports re-created, no stale connection.
    assert "reconcile failed" not in (n.root / "nodeosd.log").read_text(errors="replace")[log_at:]
    out = n.root / "back2.bin"
    _dd(n, nqn, n.addr, "4420", "--ib", "Fn1", "--of", str(out), "--count", "1")
    assert out.read_bytes() == (n.root / "src.bin").read_bytes()[:MIB]


def test_a_hung_target_does_not_hold_the_nodes_status(node: Node) -> None:
    """SIGSTOP: the target's socket still takes connections but nothing answers. `nodeos status`
    answered after 60 s (the RPC client's timeout), each call leaving one more stuck describe
    behind the client's lock; the daemon looked dead (found by the SPDK replay helper). Now a
    status answers within the describe's bound before the watch calls the data plane down, and
    at once after; the target resumed, the data plane is up again."""
    n = node
    os.kill(n.target.proc.pid, signal.SIGSTOP)
    try:
        took = []
        for _ in range(6):
            t0 = time.monotonic()
            _health(n)
            took.append(time.monotonic() - t0)
            time.sleep(1)
        assert max(took) < 10, took
        _wait("status says the data plane is down", lambda: _health(n)["state"] == "down", timeout=30)
        t0 = time.monotonic()
        assert "SPDK" in n.ok("status")["dataplane"]["error"]
        assert time.monotonic() - t0 < 3
    finally:
        os.kill(n.target.proc.pid, signal.SIGCONT)
    _wait("status says up", lambda: _health(n)["state"] == "up", timeout=90)
