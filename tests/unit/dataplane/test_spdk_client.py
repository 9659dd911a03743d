"""The SPDK RPC client over a real unix socket: a target restarted under it (issue 10's re-export)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from nodeos.dataplane.spdk.client import SpdkRpc
from nodeos.errors import EnvironmentProblem


class Target:
    """A unix socket server answering every request with its own name, one connection at a time."""

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(4)
        self.conns: list[socket.socket] = []
        self.seen: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(conn)
            while chunk := _recv(conn):
                req = json.loads(chunk)
                self.seen.append(req["method"])
                conn.sendall(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": self.name}).encode())

    def kill(self, path: Path) -> None:
        for c in self.conns:  # as a dead process's: shut at once (close alone waits for the reader)
            c.shutdown(socket.SHUT_RDWR)
            c.close()
        self.srv.close()
        path.unlink()


def _recv(conn: socket.socket) -> bytes:
    try:
        return conn.recv(65536)
    except OSError:
        return b""


def test_a_call_after_the_target_restarted_reaches_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "spdk.sock"
    old = Target(path, "old")
    rpc = SpdkRpc(str(path), timeout=5)
    assert rpc.call("spdk_get_version") == "old"
    old.kill(path)
    new = Target(path, "new")
    # The first call after the restart is answered by the new target, not failed on the old
    # connection (the re-export's first call, a whole re-apply round of 5 s lost before).
    assert rpc.call("bdev_lvol_get_lvstores") == "new"
    assert new.seen == ["bdev_lvol_get_lvstores"] and old.seen == ["spdk_get_version"]
    # ... on a new connection, counted: what was set up on the old target (its transports) is
    # checked again by the backend.
    assert rpc.connections == 2 and rpc.call("spdk_get_version") == "new" and rpc.connections == 2
    new.kill(path)
    with pytest.raises(EnvironmentProblem, match="SPDK does not answer"):
        rpc.call("bdev_get_bdevs")  # no target at all: said so, not tried for ever
    rpc.close()
