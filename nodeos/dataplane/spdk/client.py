"""JSON-RPC to SPDK over its unix socket.

Our own connection, not the PyPI `spdk` package's JSONRPCClient: that client re-parses its whole
buffer after every 4 KiB read and counts its timeout in CPU time, so a 15 MB reply
(`bdev_get_bdevs` at 10,000 volumes) never finished (docs/benchmarks.md "SPDK scale"). SPDK ends
every reply with a newline, and compact JSON holds no raw newline, so a reply is parsed once,
when its newline arrives. The package still checks our parameter names in the tests.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Sequence
from typing import Any

from nodeos.errors import EnvironmentProblem, OperationFailed


class SpdkRpcError(Exception):
    """An error object returned by SPDK, kept raw; errors.map_error() explains it."""

    def __init__(self, method: str, params: dict[str, Any] | None, code: int, message: str) -> None:
        super().__init__(f"{method}: {code} {message}")
        self.method = method
        self.params = params or {}
        self.code = code
        self.message = message


class _Connection:
    """One JSON-RPC connection: a request out, its reply line back, parsed once."""

    READ = 1 << 20  # a 10,000-bdev listing is ~15 MB: few reads

    def __init__(self, path: str, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)  # wall clock, per read
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self._id = 0
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no newline

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._id += 1
        req: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": self._id}
        if params:
            req["params"] = params
        self.sock.sendall(json.dumps(req).encode())
        return self._id

    def recv(self) -> Any:
        while True:
            end = self._buf.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                self._scanned = 0
                if line.strip():
                    return json.loads(line)
                continue
            self._scanned = len(self._buf)
            chunk = self.sock.recv(self.READ)
            if not chunk:
                raise OSError("SPDK closed the RPC connection")
            self._buf += chunk

    def close(self) -> None:
        self.sock.close()


class SpdkRpc:
    def __init__(self, sock_path: str, timeout: float = 60.0) -> None:
        self.sock_path = sock_path
        self.timeout = timeout
        self._client: _Connection | None = None
        self.connections = 0  # made so far: a new one may reach a restarted (empty) target
        # Requests sent that may change a subsystem, and connections made (a restarted target):
        # what a freeze read stays true while this does not move (spdk/freeze.py).
        self.nvmf_changes = 0
        # One request/reply at a time on the socket: the daemon calls the data plane from its
        # worker and from other threads (the leg watch's list_remotes); interleaved, one thread
        # read the other's reply ("unexpected reply") or found the socket closed under it.
        self._lock = threading.RLock()

    def _connect(self) -> _Connection:
        try:
            return _Connection(self.sock_path, self.timeout)
        except OSError as e:
            raise EnvironmentProblem(
                f"SPDK does not answer on {self.sock_path}: {e} (is nvmf_tgt running?)"
            ) from None

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """`timeout`: for this call's answer instead of the client's (an attach waits while SPDK
        loads the drive's lvstore: 132 s for 10,000 lvols here, docs/benchmarks.md "SPDK scale")."""
        with self._lock:
            return self._call(method, params, timeout)

    def _call(self, method: str, params: dict[str, Any] | None, timeout: float | None = None) -> Any:
        client, req_id = self._send_first(method, params)
        try:
            if timeout is not None:
                client.sock.settimeout(timeout)
            reply = client.recv()
        except (OSError, ValueError) as e:  # the socket's errors, or a reply that is no JSON
            self.close()
            raise OperationFailed(f"SPDK RPC {method} failed on {self.sock_path}: {e}") from None
        finally:
            if timeout is not None and self._client is client:
                client.sock.settimeout(self.timeout)
        if not isinstance(reply, dict) or reply.get("id") != req_id:
            self.close()
            raise OperationFailed(f"SPDK RPC {method}: unexpected reply {str(reply)[:200]}")
        if "error" in reply:
            err = reply["error"] or {}
            raise SpdkRpcError(method, params, int(err.get("code", 0)), str(err.get("message", "")))
        return reply.get("result")

    def _send_first(self, method: str, params: dict[str, Any] | None) -> tuple[_Connection, int]:
        """Send a request on the connection (made when there is none); its id."""
        client = self._client
        fresh = client is None
        if client is None:
            client = self._client = self._connect()
            self.connections += 1
            self.nvmf_changes += 1
        if method.startswith("nvmf_") and "_get_" not in method:
            self.nvmf_changes += 1
        try:
            return client, client.send(method, params or None)
        except OSError as e:
            self.close()
            if fresh:
                raise OperationFailed(f"SPDK RPC {method} failed on {self.sock_path}: {e}") from None
            # A connection from before that broke (the target restarted: its re-export's first
            # call) never carried this request: it goes once more, on a new connection.
            return self._send_first(method, params)

    def call_many(self, requests: Sequence[tuple[str, dict[str, Any] | None]], window: int = 64) -> list[Any]:
        """Independent requests pipelined on one connection, at most `window` in flight: SPDK's
        RPC server polls its socket every 4 ms and answers what it read in that poll, so one
        request at a time costs ~8 ms whatever it does, and 64 in flight cost about the same.
        Answers in request order; an error answer is its SpdkRpcError in the list (raised by the
        caller), a broken connection raises OperationFailed for all."""
        with self._lock:
            if not requests:
                return []
            # A connection that broke is replaced at the first send, as by call(); the first
            # request is not waited for (two requests would cost two round trips).
            client, first = self._send_first(*requests[0])
            out: list[Any] = [None] * len(requests)
            waiting: dict[int, int] = {first: 0}  # request id -> index
            sent = 1
            try:
                while sent < len(requests) or waiting:
                    while sent < len(requests) and len(waiting) < window:
                        waiting[client.send(*requests[sent])] = sent
                        sent += 1
                    reply = client.recv()
                    i = waiting.pop(reply.get("id"), None) if isinstance(reply, dict) else None
                    if i is None:
                        raise ValueError(f"unexpected reply {str(reply)[:200]}")
                    if "error" in reply:
                        err = reply["error"] or {}
                        method, params = requests[i]
                        out[i] = SpdkRpcError(
                            method, params, int(err.get("code", 0)), str(err.get("message", ""))
                        )
                    else:
                        out[i] = reply.get("result")
            except (OSError, ValueError) as e:
                self.close()
                raise OperationFailed(
                    f"SPDK RPCs ({len(requests)} pipelined) failed on {self.sock_path}: {e}"
                ) from None
            return out

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                with contextlib.suppress(OSError):
                    self._client.close()
                self._client = None
