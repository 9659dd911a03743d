"""Edges of the daemon tested for real: the notify datagram protocol on real sockets
(abstract and path), and config loading from real files."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from nodeos.daemon import config as configmod
from nodeos.daemon.notify import Notifier
from nodeos.errors import BadInput


def _recv(s: socket.socket) -> dict[str, str]:
    s.settimeout(5)
    data = s.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.splitlines())


def test_notify_over_a_path_socket(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(str(tmp_path / "n.sock"))
        n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "n.sock"), "WATCHDOG_USEC": "5000000"})
        assert n.enabled and n.watchdog_usec == 5_000_000
        assert n.ready("ready: all good")
        m = _recv(s)
        assert m["READY"] == "1" and m["STATUS"] == "ready: all good" and m["MAINPID"] == str(os.getpid())
        assert n.watchdog()
        assert _recv(s) == {"WATCHDOG": "1"}
        n.close()


def test_notify_over_an_abstract_socket() -> None:
    name = f"nodeos-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(b"\0" + name.encode())
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.status("working")
        assert _recv(s) == {"STATUS": "working"}
        n.close()


def test_notify_never_blocks_on_a_reader_that_does_not_drain(tmp_path: Path) -> None:
    """A receiver that stopped reading (its queue full): status lines and watchdog pings are
    dropped at once, READY waits at most READY_WAIT_S; a plain sendto blocked the daemon's event
    loop until the reader drained (minutes, in the SPDK data plane watch test)."""
    import time

    from nodeos.daemon import notify

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(str(tmp_path / "n.sock"))
        n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "n.sock")})
        t0 = time.monotonic()
        sent = [n.status(f"line {i}") for i in range(200)]  # far past any queue length
        assert time.monotonic() - t0 < 2.0
        assert sent[0] and not sent[-1]
        t0 = time.monotonic()
        assert not n.ready("ready")
        assert notify.READY_WAIT_S - 0.5 <= time.monotonic() - t0 < notify.READY_WAIT_S + 2
        assert _recv(s) == {"STATUS": "line 0"}  # what fitted arrived, in order
        n.close()


def test_notify_without_systemd_is_a_quiet_no_op() -> None:
    n = Notifier({})
    assert not n.enabled and not n.ready("x") and n.watchdog_usec == 0


def test_watchdog_for_another_pid_is_ignored(tmp_path: Path) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "x"), "WATCHDOG_USEC": "100", "WATCHDOG_PID": "1"})
    assert n.watchdog_usec == 0


def test_notify_to_a_missing_socket_does_not_raise(tmp_path: Path) -> None:
    assert not Notifier({"NOTIFY_SOCKET": str(tmp_path / "absent")}).ready("x")


def test_config_defaults_when_the_default_file_is_absent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(configmod, "DEFAULT_CONFIG", str(tmp_path / "absent.toml"))
    cfg, src = configmod.load(None, {})
    assert src == "defaults"
    assert cfg.api_socket == "/run/nodeos/api.sock" and cfg.dataplane == "auto" and cfg.node_name


def test_config_file_then_flags(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('dataplane = "spdk"\nspdk_socket = "/run/spdk.sock"\nstorage_address = "192.0.2.1"\n')
    cfg, src = configmod.load(str(p), {"dataplane": "none", "node_name": None})
    assert src == str(p)
    assert (
        cfg.dataplane == "none"
        and cfg.spdk_socket == "/run/spdk.sock"
        and cfg.storage_address == ["192.0.2.1"]
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("x = 1\n", "config"),
        ("dataplane = 'fast'\n", "dataplane"),
        ("peer_listen = 'host'\n", "peer_listen"),
        ("api_socket = '" + "/x" * 60 + "'\n", "api_socket"),
        ("log_level = 'loud'\n", "log_level"),
        ("storage_address = ['1.2.3']\n", "storage_address"),
        ("replace_after_s = 0\n", "replace_after_s"),
        ("raft_tick_ms = 5\n", "raft_tick_ms"),
        ("raft_tick_ms = 300.5\n", "raft_tick_ms"),
    ],
)
def test_config_errors_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(BadInput) as ei:
        configmod.load(str(p), {})
    assert ei.value.field == field
