"""The soak's host keeps learning the paths of the volumes under fio
(tests/tooling/nodeos_devtools/lab/soak_paths.py),
over a made-up GPU node whose discovery answers what the test says: seed 8's fio `error 5` came
from a host that connected once and never met the node a volume moved to."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos_devtools.lab import soak_io, soak_paths
from nodeos_devtools.lab.qga import ExecResult
from nodeos_devtools.lab.soak_paths import PathWatch

V2 = "nqn.2014-08.io.nodeos:vol:v2"
V3 = "nqn.2014-08.io.nodeos:vol:v3"


def _res(rc: int, out: str = "", err: str = "") -> ExecResult:
    return ExecResult(rc, out.encode(), err.encode())


class Host:
    """h1: discovery at each storage address lists `exports` (nqn -> addresses serving it); a
    connect adds a controller; sysfs shows the controllers it holds."""

    def __init__(self) -> None:
        self.exports: dict[str, list[str]] = {V2: ["198.18.0.11", "198.18.0.13"], V3: ["198.18.0.11"]}
        self.held: set[tuple[str, str]] = set()  # (nqn, addr)
        self.connects: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def exec(self, vm: str, argv: list[str], timeout: float = 120.0, input: Any = None) -> ExecResult:
        with self.lock:
            if argv[1] == "discover":
                recs = [
                    {"subnqn": n, "trtype": "tcp", "traddr": a, "trsvcid": "4420"}
                    for n, addrs in self.exports.items()
                    for a in addrs
                ]
                return _res(0, json.dumps({"records": recs}))
            assert argv[1] == "connect", argv
            nqn, addr = argv[argv.index("-n") + 1], argv[argv.index("-a") + 1]
            if (nqn, addr) in self.held:
                return _res(1, "", "already connected")
            self.held.add((nqn, addr))
            self.connects.append((nqn, addr))
            return _res(0)

    def sh(self, vm: str, script: str, timeout: float = 120.0, *, check: bool = True) -> ExecResult:
        nqn = re.search(r"= '?([^ ']+)'? \]", script)
        assert nqn, script
        with self.lock:
            lines = [
                f"traddr={a},trsvcid=4420,src_addr=198.18.0.21" for n, a in sorted(self.held) if n == nqn[1]
            ]
        return _res(0, "\n".join(lines) + "\n")

    def learned(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.connects)


def _wait(cond: Any, seconds: float = 10) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Host:
    monkeypatch.setattr(soak_paths, "PERIOD_S", 0.02)
    return Host()


def _watch(host: Host) -> PathWatch:
    w = PathWatch(host, "h1", lambda: ["198.18.0.11", "198.18.0.12"], lambda m: None)  # type: ignore[arg-type]
    w.start()
    return w


def test_a_watched_volume_gains_the_node_it_moved_to_and_no_other_volume_is_connected(host: Host) -> None:
    host.held = {(V2, "198.18.0.11"), (V2, "198.18.0.13")}  # connected once, at fio's start
    w = _watch(host)
    try:
        w.watch(V2)
        time.sleep(0.1)
        assert host.learned() == [], "a path already held is not connected again"
        with host.lock:
            host.exports[V2] = ["198.18.0.12", "198.18.0.11"]  # a drain moved a replica to s2
        assert _wait(lambda: (V2, "198.18.0.12") in host.learned())
        assert w.connected == 1
        assert all(n == V2 for n, _ in host.learned()), "v3 is granted but not watched: left alone"
    finally:
        w.stop()


def test_after_unwatch_and_disconnect_the_watch_does_not_reconnect(host: Host) -> None:
    w = _watch(host)
    try:
        w.watch(V2)
        assert _wait(lambda: len(host.learned()) == 2)
        w.unwatch(V2)
        with host.lock:  # the soak's disconnect, once unwatch has returned
            host.held.clear()
            host.connects.clear()
        time.sleep(0.1)
        assert host.learned() == []
    finally:
        w.stop()


def test_a_failing_round_is_logged_and_the_next_round_still_runs(host: Host) -> None:
    logged: list[str] = []
    calls = {"n": 0}
    real = host.exec

    def flaky(vm: str, argv: list[str], timeout: float = 120.0, input: Any = None) -> ExecResult:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("guest agent did not answer")
        return real(vm, argv, timeout)

    host.exec = flaky  # type: ignore[method-assign]
    w = PathWatch(host, "h1", lambda: ["198.18.0.11"], logged.append)  # type: ignore[arg-type]
    w.start()
    try:
        w.watch(V2)
        assert _wait(lambda: len(host.learned()) == 2)
        assert any("guest agent did not answer" in m for m in logged)
    finally:
        w.stop()


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("traddr=198.18.0.11,trsvcid=4420,src_addr=198.18.0.21", ("198.18.0.11", "4420")),
        ("traddr=198.18.0.11,trsvcid=4420", ("198.18.0.11", "4420")),
        ("/dev/nvme0n1", None),
        ("", None),
    ],
)
def test_a_controllers_address_is_read_from_sysfs(line: str, want: tuple[str, str] | None) -> None:
    assert soak_io.parse_address(line) == want


def test_the_controllers_of_that_subsystem_only_are_read_from_sysfs_by_a_real_shell(tmp_path: Path) -> None:
    for n, nqn, ctrls in (
        (0, V3, {"nvme0": "198.18.0.12"}),
        (1, V2, {"nvme1": "198.18.0.11", "nvme4": "198.18.0.13"}),
    ):
        d = tmp_path / "sys/class/nvme-subsystem" / f"nvme-subsys{n}"
        d.mkdir(parents=True)
        (d / "subsysnqn").write_text(nqn + "\n")
        (d / f"nvme{n}n1").mkdir()  # the head: no address
        for c, addr in ctrls.items():
            (d / c).mkdir()
            (d / c / "address").write_text(f"traddr={addr},trsvcid=4420,src_addr=198.18.0.21\n")
    r = subprocess.run(
        ["sh", "-c", soak_io.connected_script(V2, str(tmp_path))], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    got = {p for line in r.stdout.splitlines() if (p := soak_io.parse_address(line))}
    assert got == {("198.18.0.11", "4420"), ("198.18.0.13", "4420")}
