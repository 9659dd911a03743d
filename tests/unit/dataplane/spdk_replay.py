"""ReplayedSpdkTarget: a REPLAY of the recorded SPDK v26.05 JSON-RPC transcript.

Not an SPDK emulation: it serves a real unix socket and answers only requests that a real
target received in ../shared/spdk/rpc-transcript-v26.05.jsonl (same method, same params;
the id may differ), with the response the real target gave. Anything else is answered
with a JSON-RPC error and recorded in `unmatched`, so a test sees at once that our client
sent something the real target was never shown to accept.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path
from typing import Any

TRANSCRIPT = "spdk/rpc-transcript-v26.05.jsonl"
NOT_RECORDED = -32099


def load_transcript(shared_dir: Path) -> list[dict[str, Any]]:
    with open(shared_dir / TRANSCRIPT) as f:
        return [json.loads(line) for line in f if line.strip()]


def _key(req: dict[str, Any]) -> str:
    return json.dumps([req.get("method"), req.get("params", {})], sort_keys=True)


class ReplayedSpdkTarget:
    def __init__(self, entries: list[dict[str, Any]], sock_path: Path) -> None:
        self.sock_path = sock_path
        # Several recorded calls share a request (e.g. nvmf_get_subsystems at two points):
        # answer them in recorded order, the last one repeating.
        self.answers: dict[str, list[dict[str, Any]]] = {}
        for e in entries:
            self.answers.setdefault(_key(e["request"]), []).append(e["response"])
        self.received: list[dict[str, Any]] = []
        self.unmatched: list[dict[str, Any]] = []
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(sock_path))
        self._srv.listen(4)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _answer(self, req: dict[str, Any]) -> dict[str, Any]:
        self.received.append(req)
        queue = self.answers.get(_key(req))
        if not queue:
            self.unmatched.append(req)
            err = {"code": NOT_RECORDED, "message": "request not in the recorded transcript"}
            return {"jsonrpc": "2.0", "id": req.get("id"), "error": err}
        resp = queue.pop(0) if len(queue) > 1 else queue[0]
        return {**resp, "id": req.get("id")}

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            with conn:
                buf = ""
                dec = json.JSONDecoder()
                while True:
                    try:
                        chunk = conn.recv(65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    buf += chunk.decode()
                    while True:
                        s = buf.lstrip()
                        try:
                            req, idx = dec.raw_decode(s)
                        except ValueError:
                            break
                        buf = s[idx:]
                        conn.sendall(json.dumps(self._answer(req)).encode() + b"\n")  # as SPDK ends a reply

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self._srv.shutdown(socket.SHUT_RDWR)  # wakes the accept() below
        self._srv.close()
        self._thread.join(timeout=2)
