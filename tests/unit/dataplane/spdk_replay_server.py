"""ReplayServer: serves the SPDK replay (tests/spdk/replay/spdk-v26.05.replay.jsonl) on a unix socket.

Not an SPDK emulation: it answers, in the order they were recorded, the requests a real nvmf_tgt
received from the product (tests/spdk/record_replay.py), each with the answer that target gave.
A request that is not the next one recorded (another method, other params) is answered with a
JSON-RPC error and kept in `mismatches`; so is a recorded request the product never sends (left
in `pending`). The work directory of the recording is written @WORK@ in the file and stands for
the test's own here.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path
from typing import Any

REPLAY = Path(__file__).resolve().parents[2] / "spdk" / "replay" / "spdk-v26.05.replay.jsonl"
WORK = "@WORK@"
NOT_RECORDED = -32099


def load_replay(path: Path = REPLAY) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The header, the steps (with their outcomes) and the exchanges, in file order."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, rest = lines[0], lines[1:]
    return header, [x for x in rest if "outcome" in x], [x for x in rest if "request" in x]


def request_key(req: dict[str, Any]) -> tuple[str, str]:
    return str(req.get("method")), json.dumps(req.get("params", {}), sort_keys=True)


class ReplayServer:
    def __init__(self, sock_path: Path, work: str) -> None:
        self.sock_path = sock_path
        self.work = work
        self.pending: list[dict[str, Any]] = []  # recorded exchanges not yet asked for, in order
        self.mismatches: list[tuple[dict[str, Any] | None, dict[str, Any]]] = []  # (expected, got)
        self.served = 0
        self._lock = threading.Lock()
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(sock_path))
        self._srv.listen(8)
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def expect(self, exchanges: list[dict[str, Any]]) -> None:
        with self._lock:
            self.pending.extend(exchanges)

    def _answer(self, req: dict[str, Any]) -> dict[str, Any]:
        got = json.loads(json.dumps(req).replace(self.work, WORK))
        with self._lock:
            nxt = self.pending[0] if self.pending else None
            if nxt is not None and request_key(nxt["request"]) == request_key(got):
                self.pending.pop(0)
                self.served += 1
                return {**nxt["response"], "id": req.get("id")}
            self.mismatches.append((nxt["request"] if nxt else None, got))
        err = {"code": NOT_RECORDED, "message": "not the next request recorded in the replay"}
        return {"jsonrpc": "2.0", "id": req.get("id"), "error": err}

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        dec = json.JSONDecoder()
        buf = ""
        with conn:
            while True:
                try:
                    chunk = conn.recv(1 << 20)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk.decode()
                while True:
                    s = buf.lstrip()
                    try:
                        req, idx = dec.raw_decode(s)
                    except ValueError:
                        break
                    buf = s[idx:]
                    with contextlib.suppress(OSError):  # as SPDK ends every reply: a newline
                        conn.sendall(json.dumps(self._answer(req)).encode() + b"\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._srv.shutdown(socket.SHUT_RDWR)
        self._srv.close()
