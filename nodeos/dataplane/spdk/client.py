"""JSON-RPC to SPDK over its unix socket.

Uses the PyPI `spdk` package's JSONRPCClient (send/recv, so the error object's numeric
code survives: its `call()` folds errors into a text blob). Where the package is absent
(the appliance image ships without it), a minimal client of the same wire format is used.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
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


class _MinimalClient:
    """Same wire behaviour as spdk.rpc.client.JSONRPCClient.send/recv, nothing more."""

    def __init__(self, path: str, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self._id = 0
        self._buf = ""

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._id += 1
        req: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": self._id}
        if params:
            req["params"] = params
        self.sock.sendall(json.dumps(req).encode())
        return self._id

    def recv(self) -> dict[str, Any]:
        dec = json.JSONDecoder()
        while True:
            buf = self._buf.lstrip()
            if buf:
                try:
                    obj, idx = dec.raw_decode(buf)
                    self._buf = buf[idx:]
                    return obj
                except ValueError:
                    pass
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("SPDK closed the RPC connection")
            self._buf += chunk.decode()

    def close(self) -> None:
        self.sock.close()


class SpdkRpc:
    def __init__(self, sock_path: str, timeout: float = 60.0) -> None:
        self.sock_path = sock_path
        self.timeout = timeout
        self._client: Any = None
        self.connections = 0  # made so far: a new one may reach a restarted (empty) target
        # One request/reply at a time on the socket: the daemon calls the data plane from its
        # worker and from other threads (the leg watch's list_remotes); interleaved, one thread
        # read the other's reply ("unexpected reply") or found the socket closed under it.
        self._lock = threading.RLock()

    def _connect(self) -> Any:
        try:
            try:
                from spdk.rpc.client import JSONRPCClient, JSONRPCException
            except ImportError:
                return _MinimalClient(self.sock_path, self.timeout)
            try:
                return JSONRPCClient(self.sock_path, timeout=self.timeout)
            except JSONRPCException as e:
                raise OSError(str(e.message).splitlines()[-1]) from None
        except OSError as e:
            raise EnvironmentProblem(
                f"SPDK does not answer on {self.sock_path}: {e} (is nvmf_tgt running?)"
            ) from None

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with self._lock:
            return self._call(method, params)

    def _call(self, method: str, params: dict[str, Any] | None) -> Any:
        fresh = self._client is None
        if fresh:
            self._client = self._connect()
            self.connections += 1
        try:
            req_id = self._client.send(method, params or None)
        except OSError as e:
            self.close()
            if fresh:
                raise OperationFailed(f"SPDK RPC {method} failed on {self.sock_path}: {e}") from None
            # A connection from before that broke (the target restarted: its re-export's first
            # call) never carried this request: it goes once more, on a new connection.
            return self._call(method, params)
        try:
            reply = self._client.recv()
        except Exception as e:  # the package raises its own exception type; the socket raises OSError
            self.close()
            raise OperationFailed(f"SPDK RPC {method} failed on {self.sock_path}: {e}") from None
        if not isinstance(reply, dict) or reply.get("id") != req_id:
            self.close()
            raise OperationFailed(f"SPDK RPC {method}: unexpected reply {str(reply)[:200]}")
        if "error" in reply:
            err = reply["error"] or {}
            raise SpdkRpcError(method, params, int(err.get("code", 0)), str(err.get("message", "")))
        return reply.get("result")

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                with contextlib.suppress(OSError):
                    self._client.close()
                self._client = None
