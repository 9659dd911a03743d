"""A blocking client of nodeosd's local API (what the CLI uses).

Against a hung daemon a command must not wait in silence: connecting gives up after
CONNECT_TIMEOUT_S, a request after its timeout (DEFAULT_TIMEOUT_S unless the caller knows the
operation takes longer; NODEOS_API_TIMEOUT overrides it), and after NOTICE_AFTER_S a line on
stderr says what is being waited for. A timed-out request fails with code `daemon_timeout`:
the daemon may still carry it out. A request the cluster answers with `not_leader` (nothing was
done: an election, or a leader too starved to take it in time) is asked again for up to
NOT_LEADER_RETRY_S (or the request's own timeout), as an operator would re-run it.
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds enums and imports selectors (start-up)
import itertools
import os
import struct
import sys
import time

from nodeos.errors import EnvironmentProblem, OperationFailed, error_from_dict
from nodeos.rpc import framing

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the console's start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

_LEN = struct.Struct(">I")
CONNECT_TIMEOUT_S = 5.0
DEFAULT_TIMEOUT_S = 120.0  # the slowest node operation (a pool over many drives) fits
# A request that says how long the daemon may wait for the map (`wait`) is waited for that long
# and this much more: the daemon's answer (done, or what is still pending) always arrives first.
# Requests without one wait the daemon's default (control/params.py), below DEFAULT_TIMEOUT_S.
WAIT_MARGIN_S = 15.0
NOTICE_AFTER_S = 5.0
NOT_LEADER_RETRY_S = 120.0


def retry_not_leader(
    call: Callable[[], T],
    for_s: float = NOT_LEADER_RETRY_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, asked again while it fails with `not_leader` (the cluster did nothing), for up to
    `for_s` seconds; any other error, or `not_leader` past that, is raised as it came."""
    deadline = clock() + for_s
    while True:
        try:
            return call()
        except OperationFailed as err:
            if err.code != "not_leader" or clock() >= deadline:
                raise
        sleep(1.0)


class DaemonTimeout(OperationFailed):
    """nodeosd took the request but did not answer in time (hung, or overloaded)."""

    code = "daemon_timeout"


def default_timeout() -> float:
    raw = os.environ.get("NODEOS_API_TIMEOUT")
    try:
        t = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        t = DEFAULT_TIMEOUT_S
    return t if t > 0 else DEFAULT_TIMEOUT_S


def _seconds(v: object) -> bool:
    """A request's own timeout or wait the client may wait by: a positive finite number. Anything
    else goes to the daemon as it is, which refuses it naming the field (an infinite one made
    the socket's timeout overflow here, a traceback instead of the daemon's answer)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")


class Client:
    def __init__(self, path: str, timeout_s: float | None = None) -> None:
        self.path = path
        self.timeout_s = default_timeout() if timeout_s is None else timeout_s
        self._ids = itertools.count(1)

    def _recv_exact(self, s: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise OperationFailed("nodeosd closed the connection before answering (did it crash?)")
            buf += chunk
        return bytes(buf)

    def _wait_answer(self, s: socket.socket, what: str, notice: bool, timeout_s: float) -> None:
        """Wait for the reply's first byte; past NOTICE_AFTER_S say on stderr what is awaited."""
        first = min(NOTICE_AFTER_S, timeout_s)
        s.settimeout(first)
        try:
            s.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            if timeout_s <= first:
                raise
            if notice:  # no thread for this: the console's start-up stays lean
                sys.stderr.write(f"nodeos: still waiting for {what} (after {first:.0f} s)\n")
                sys.stderr.flush()
            s.settimeout(timeout_s - first)
            s.recv(1, socket.MSG_PEEK)
        s.settimeout(timeout_s)

    def call(self, method: str, params: dict[str, Any] | None = None, *, progress: str | None = None) -> Any:
        """Send the request and return its result; an error reply is raised as its NodeosError
        (`not_leader` only after asking again for NOT_LEADER_RETRY_S, or the request's own
        `timeout` / `wait` where it gives one: a command told to wait 2 s answers in about 2 s)."""
        bound = NOT_LEADER_RETRY_S
        for key in ("timeout", "wait"):
            v = (params or {}).get(key)
            if _seconds(v):
                bound = min(bound, float(v))
                break
        return retry_not_leader(lambda: self._call_once(method, params, progress), bound)

    def _call_once(self, method: str, params: dict[str, Any] | None, progress: str | None) -> Any:
        req_id = next(self._ids)
        timeout_s = self.timeout_s
        wait = (params or {}).get("wait")
        if _seconds(wait):
            timeout_s = max(timeout_s, float(wait) + WAIT_MARGIN_S)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(min(CONNECT_TIMEOUT_S, timeout_s))
        try:
            s.connect(self.path)
        except OSError as exc:
            s.close()
            raise EnvironmentProblem(
                f"cannot reach nodeosd at {self.path}: {exc.strerror or exc}; is it running? "
                "(choose the socket with --socket or NODEOS_SOCKET)",
                field="socket",
            ) from None
        s.settimeout(timeout_s)
        what = progress or f"nodeosd at {self.path} to answer {method}"
        spinner = _Spinner(what) if sys.stderr.isatty() else None
        try:
            s.sendall(framing.pack(framing.request(req_id, method, params or {})))
            self._wait_answer(s, what, notice=spinner is None, timeout_s=timeout_s)
            (n,) = _LEN.unpack(self._recv_exact(s, _LEN.size))
            reply = framing.unpack_body(self._recv_exact(s, n))
        except TimeoutError:
            raise DaemonTimeout(
                f"nodeosd at {self.path} did not answer {method} within {timeout_s:.0f} s; it may be "
                "hung or overloaded (see `journalctl -u nodeosd`), and may still carry the request out",
                field="socket",
            ) from None
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
