"""Process tier: real nodeosd processes with temp state dirs and sockets, driven through the
real `nodeos` CLI and raw sockets. Runs on any Linux host (data plane `none`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

VENV_BIN = Path(sys.executable).parent
NODEOSD = str(VENV_BIN / "nodeosd")
NODEOS = str(VENV_BIN / "nodeos")


class NotifyListener:
    """A NOTIFY_SOCKET of our own: what systemd would receive from the daemon."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[dict[str, str]] = []

    def wait_for(self, key: str, value: str | None = None, timeout: float = 30.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        for m in self.messages:
            if key in m and (value is None or m[key] == value):
                return m
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            msg = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append(msg)
            if key in msg and (value is None or msg[key] == value):
                return msg
        raise AssertionError(f"no {key}={value} notification within {timeout}s; got {self.messages}")

    def close(self) -> None:
        self.sock.close()


@dataclass
class Daemon:
    root: Path
    name: str = "n1"
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    notify: NotifyListener | None = None

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def socket(self) -> Path:
        return self.root / "run" / "api.sock"

    @property
    def log(self) -> Path:
        return self.root / "nodeosd.log"

    def start(self, wait_ready: bool = True) -> None:
        if self.notify is None:
            self.notify = NotifyListener(self.root / "notify.sock")
        self.notify.messages.clear()
        env = {k: v for k, v in os.environ.items() if k != "NODEOS_CRASH_AT"}
        env.update({"NOTIFY_SOCKET": str(self.notify.path), **self.env})
        cmd = [
            NODEOSD,
            "--state-dir",
            str(self.state_dir),
            "--api-socket",
            str(self.socket),
            "--dataplane",
            "none",
            "--node-name",
            self.name,
            *self.extra,
        ]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self.log.open("ab"))
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.notify is not None and self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.notify.wait_for("READY", "1", timeout=0.5)
                return
            except AssertionError:
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"nodeosd exited {self.proc.returncode} before READY:\n{self.log.read_text()}"
                    ) from None
        raise AssertionError(f"nodeosd not READY within {timeout}s:\n{self.log.read_text()}")

    def cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NODEOS_SOCKET": str(self.socket)}
        r = subprocess.run([NODEOS, *args], env=env, capture_output=True, text=True, timeout=60)
        if check:
            assert r.returncode == 0, f"nodeos {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--json", check=True).stdout)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.notify is not None:
            self.notify.close()
            self.notify = None


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    try:
        yield d
    finally:
        d.stop()
        if d.log.exists() and os.environ.get("NODEOS_SHOW_LOGS"):
            print(d.log.read_text())


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for a module's read-mostly tests (each start costs a second or two)."""
    d = Daemon(tmp_path_factory.mktemp("shared"))
    d.start()
    try:
        yield d
    finally:
        d.stop()
