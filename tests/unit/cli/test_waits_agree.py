"""The console waits at least as long as the daemon (issue 25): the demo's delete ended with the
console's own 120 s timeout while the daemon would have waited 300 s for the map, and nobody said
for what. Now a request's wait bounds the console's, the daemon's default fits inside the
console's, and a wait that ends says which node still holds what."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from pathlib import Path

import msgpack
import pytest

from nodeos.control import progress
from nodeos.control.params import DEFAULT_WAIT_S
from nodeos.rpc import client as rpc
from tests.unit.agent.test_failover_plan import report
from tests.unit.node.test_replicas import UUID, three_node_map


def test_the_daemons_default_wait_ends_before_the_console_gives_up() -> None:
    assert DEFAULT_WAIT_S + rpc.WAIT_MARGIN_S <= rpc.DEFAULT_TIMEOUT_S


def _slow_daemon(path: Path, delay_s: float) -> threading.Thread:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)

    def serve() -> None:
        for _ in range(2):
            conn, _ = srv.accept()
            with conn:
                (n,) = struct.unpack(">I", conn.recv(4))
                req = msgpack.unpackb(conn.recv(n), raw=False)
                time.sleep(delay_s)
                body = msgpack.packb({"id": req["id"], "result": "done"})
                with contextlib.suppress(OSError):
                    conn.sendall(struct.pack(">I", len(body)) + body)
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_a_request_that_says_its_wait_is_waited_for_that_long(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    _slow_daemon(path, 1.0)
    c = rpc.Client(str(path), timeout_s=0.5)
    assert c.call("volume.delete", {"name": "v", "wait": 1}) == "done"
    with pytest.raises(rpc.DaemonTimeout, match="within 0 s"):
        c.call("volume.delete", {"name": "v"})


def test_a_delete_that_waits_says_which_node_holds_what() -> None:
    st = three_node_map()
    vol = st["volumes"][UUID]
    vol["state"] = "deleting"
    report(st, 1, state="syncing", step="delete: waiting for primary s2 to stop its mirror")
    report(st, 2, state="in-sync")
    st["nodes"][3]["health"] = "down"
    report(st, 3, state="syncing")
    said = progress.deleting(st, vol["name"])
    assert said == (
        f"deleting {vol['name']}: s2: not started; s1: delete: waiting for primary s2 to stop its mirror; "
        "s3: node down"
    )
    del st["reports"][2]["replicas"][UUID]
    assert "s2: not started" not in progress.deleting(st, vol["name"])
