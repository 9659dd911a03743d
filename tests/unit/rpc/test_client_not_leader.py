"""The console's client asks again while the cluster answers `not_leader` (nothing was done), for
a bounded time: the request's own timeout where it gives one. Against a real unix socket."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.errors import NodeosError, OperationFailed
from nodeos.rpc import framing
from nodeos.rpc.client import Client

NOT_LEADER = {"code": "not_leader", "message": "no leader could take the request"}


def _serve(path: Path, answers: list[dict | None], seen: list[str]) -> Iterator[None]:
    """Answer each connection's request with the next error (None: success), then the last one."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen()
    srv.settimeout(0.2)
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                (n,) = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))
                req = framing.unpack_body(conn.recv(n, socket.MSG_WAITALL))
                seen.append(req["method"])
                err = answers[min(i, len(answers) - 1)]
                i += 1
                ok = framing.reply_ok(req["id"], {"ok": 1})
                conn.sendall(framing.pack(ok if err is None else framing.reply_error(req["id"], err)))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    yield
    stop.set()
    t.join()
    srv.close()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "api.sock"


def test_not_leader_is_asked_again_until_a_leader_answers(sock: Path) -> None:
    seen: list[str] = []
    for _ in _serve(sock, [NOT_LEADER, NOT_LEADER, None], seen):
        assert Client(str(sock)).call("volume.create", {"name": "v", "wait": 0}) == {"ok": 1}
    assert seen == ["volume.create"] * 3


def test_not_leader_past_the_requests_own_timeout_is_the_answer(sock: Path) -> None:
    seen: list[str] = []
    for _ in _serve(sock, [NOT_LEADER], seen):
        t0 = time.monotonic()
        with pytest.raises(OperationFailed) as exc:
            Client(str(sock)).call("cluster.kv.put", {"key": "k", "value": "v", "timeout": 2})
        took = time.monotonic() - t0
    assert exc.value.code == "not_leader"
    assert 2 <= took < 10 and 2 <= len(seen) <= 5, (took, seen)


def test_other_errors_are_not_asked_again(sock: Path) -> None:
    seen: list[str] = []
    for _ in _serve(sock, [{"code": "already_exists", "field": "name", "message": "exists"}, None], seen):
        with pytest.raises(NodeosError) as exc:
            Client(str(sock)).call("volume.create", {"name": "v"})
    assert exc.value.code == "already_exists" and seen == ["volume.create"]


@pytest.mark.parametrize("wait", [float("inf"), float("nan"), -1])
def test_a_wait_that_is_no_finite_number_goes_to_the_daemon_as_it_is(sock: Path, wait: float) -> None:
    """The daemon answers it (bad input naming the field); before, an infinite one overflowed the
    client's socket timeout: a traceback, nothing asked."""
    seen: list[str] = []
    refused = {
        "code": "bad_input",
        "field": "wait",
        "message": "wait must be a number of seconds in [0, 3600]",
    }
    for _ in _serve(sock, [refused], seen):
        with pytest.raises(NodeosError) as exc:
            Client(str(sock)).call("volume.create", {"name": "v", "wait": wait})
    assert exc.value.code == "bad_input" and exc.value.field == "wait" and seen == ["volume.create"]
