"""The API socket takes any bytes a client sends: malformed, oversized, wrong-version or
truncated frames get an error reply (when one can be sent) and the daemon keeps serving."""

from __future__ import annotations

import socket
import struct
from typing import Any

import msgpack
import pytest

from nodeos.rpc import framing

from .conftest import Daemon

pytestmark = pytest.mark.process


def _connect(d: Daemon) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(d.socket))
    return s


def _read_reply(s: socket.socket) -> dict[str, Any] | None:
    header = b""
    while len(header) < 4:
        chunk = s.recv(4 - len(header))
        if not chunk:
            return None
        header += chunk
    (n,) = struct.unpack(">I", header)
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        assert chunk, "connection closed inside a reply"
        body += chunk
    return msgpack.unpackb(body, raw=False)


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _call(d: Daemon, method: str, params: dict[str, Any]) -> dict[str, Any]:
    with _connect(d) as s:
        s.sendall(framing.pack(framing.request(7, method, params)))
        reply = _read_reply(s)
    assert reply is not None
    return reply


@pytest.fixture
def live(daemon: Daemon) -> Daemon:
    daemon.start()
    return daemon


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (_frame(b"\xc1\xc1\xc1"), "bad_frame"),  # not msgpack
        (_frame(msgpack.packb([1, 2, 3])), "bad_frame"),  # not a map
        (_frame(msgpack.packb({"v": 99, "id": 1, "method": "status"})), "bad_version"),
        (_frame(msgpack.packb({"id": 1, "method": "status"})), "bad_version"),  # no version
        (_frame(msgpack.packb({"v": 1, "id": 1, "method": 5})), "bad_frame"),
        (_frame(msgpack.packb({"v": 1, "id": 1, "method": "status", "params": [1]})), "bad_frame"),
        (_frame(msgpack.packb({"v": 1, "id": 1, "method": "no.such"})), "bad_input"),
    ],
)
def test_bad_requests_get_an_error_reply_and_the_connection_stays_usable(
    live: Daemon, payload: bytes, code: str
) -> None:
    with _connect(live) as s:
        s.sendall(payload)
        reply = _read_reply(s)
        assert reply is not None and reply["error"]["code"] == code, reply
        # The same connection still serves a good request afterwards.
        s.sendall(framing.pack(framing.request(2, "daemon.ping")))
        ok = _read_reply(s)
        assert ok == {"id": 2, "result": {"pong": True, "pid": live.proc.pid}}  # type: ignore[union-attr]


def test_oversized_frame_is_refused_without_reading_it(live: Daemon) -> None:
    with _connect(live) as s:
        s.sendall(struct.pack(">I", 0xFFFFFFF0) + b"x" * 100)
        reply = _read_reply(s)
        assert reply is not None and reply["error"]["code"] == "too_large"
        assert _read_reply(s) is None  # stream out of step: the daemon hangs up
    assert live.cli("status").returncode == 0


@pytest.mark.parametrize("payload", [b"\x00\x00", struct.pack(">I", 50) + b"short", b""])
def test_truncated_frames_and_hangups_do_not_hurt(live: Daemon, payload: bytes) -> None:
    with _connect(live) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        reply = _read_reply(s)
        assert reply is None or "error" in reply
    st = live.cli_json("status")
    assert st["node_name"] == "n1"


def test_bad_frames_are_counted_and_logged(live: Daemon) -> None:
    for _ in range(3):
        with _connect(live) as s:
            s.sendall(_frame(b"\xc1"))
            _read_reply(s)
    st = live.cli_json("status")
    assert st["api"]["bad_frames"] >= 3
    assert "bad frame" in live.log.read_text()


def test_daemon_validates_requests_itself(live: Daemon) -> None:
    """A client that skips the CLI's checks still gets a field-named bad_input, nothing stored."""
    cases = [
        ("host.add", {"nqn": "nqn.bad"}, "host"),
        ("host.add", {"nqn": "nqn.2014-08.com.example:" + "x" * 200}, "host"),
        ("host.add", {}, "host"),
        (
            "host.add",
            {"nqn": "nqn.2014-08.com.example:h", "dhchap_secret": "DHHC-1:01:abc:"},
            "dhchap_secret",
        ),
        ("volume.create", {"name": "v1", "size": "lots"}, "size"),
        ("volume.create", {"name": "-v", "size": "1GiB"}, "name"),
        ("volume.create", {"name": "v", "size": "1GiB", "qos_iops": 5}, "qos_iops"),
        ("volume.grant", {"name": "v", "host": 12}, "host"),
        ("pool.create", {"name": "p", "drives": ""}, "drives"),
    ]
    for method, params, field in cases:
        reply = _call(live, method, params)
        assert reply["error"]["code"] == "bad_input", (method, params, reply)
        assert reply["error"]["field"] == field, (method, params, reply)
    assert _call(live, "host.list", {})["result"] == []
