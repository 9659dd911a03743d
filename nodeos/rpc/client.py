"""A blocking client of nodeosd's local API (what the CLI uses)."""

from __future__ import annotations

import itertools
import socket
import struct
import sys
import time

from nodeos.errors import EnvironmentProblem, OperationFailed, error_from_dict
from nodeos.rpc import framing

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the console's start-up
if TYPE_CHECKING:
    from typing import Any

_LEN = struct.Struct(">I")


class Client:
    def __init__(self, path: str, timeout_s: float = 600.0) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)

    def _recv_exact(self, s: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise OperationFailed("nodeosd closed the connection before answering (did it crash?)")
            buf += chunk
        return bytes(buf)

    def call(self, method: str, params: dict[str, Any] | None = None, *, progress: str | None = None) -> Any:
        """Send one request and return its result; an error reply is raised as its NodeosError."""
        req_id = next(self._ids)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout_s)
        try:
            s.connect(self.path)
        except OSError as exc:
            s.close()
            raise EnvironmentProblem(
                f"cannot reach nodeosd at {self.path}: {exc.strerror or exc}; is it running? "
                "(choose the socket with --socket or NODEOS_SOCKET)",
                field="socket",
            ) from None
        spinner = _Spinner(progress) if progress and sys.stderr.isatty() else None
        try:
            s.sendall(framing.pack(framing.request(req_id, method, params or {})))
            (n,) = _LEN.unpack(self._recv_exact(s, _LEN.size))
            reply = framing.unpack_body(self._recv_exact(s, n))
        except TimeoutError:
            raise OperationFailed(f"nodeosd did not answer {method} within {self.timeout_s:.0f}s") from None
        except (OSError, framing.FrameError) as exc:
            raise OperationFailed(f"talking to nodeosd failed: {exc}") from None
        finally:
            if spinner:
                spinner.stop()
            s.close()
        if "error" in reply:
            err = reply["error"] if isinstance(reply["error"], dict) else {"message": str(reply["error"])}
            raise error_from_dict(err)
        return reply.get("result")


class _Spinner:
    """Progress on a terminal while a long operation runs: what, and for how long."""

    def __init__(self, what: str) -> None:
        import threading  # only on a terminal, for long operations

        self.what = what
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        start = time.monotonic()
        for ch in itertools.cycle("|/-\\"):
            if self._stop.wait(0.2):
                break
            sys.stderr.write(f"\r{ch} {self.what} ({time.monotonic() - start:.0f}s)")
            sys.stderr.flush()
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()

    def stop(self) -> None:
        self._stop.set()
        self._t.join()
