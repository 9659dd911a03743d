"""A small client of qemu-guest-agent over its virtio-serial unix socket.

The agent serves one client at a time and keeps replies meant for an earlier client, so every
exchange opens the socket, synchronises with `guest-sync-delimited` (reading until our id
comes back), sends one command and closes. A file lock next to the socket serialises
exchanges between threads and processes; long commands release it between status polls, so
several `exec`s can run in one VM at once.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from nodeos.errors import OperationFailed

COPY_CHUNK = 2 << 20  # bytes a guest-file-write carries (base64 in one JSON message)


class AgentUnavailable(OperationFailed):
    """The guest agent did not answer (VM still booting, killed, or hung)."""


class CommandTimedOut(OperationFailed):
    """A command in the VM outlived its timeout and was killed."""


@dataclass(frozen=True)
class ExecResult:
    """What a command inside a VM did."""

    rc: int
    stdout_bytes: bytes
    stderr_bytes: bytes
    signal: int | None = None

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode(errors="replace")

    @property
    def ok(self) -> bool:
        return self.rc == 0


class GuestAgent:
    def __init__(self, sock_path: Path) -> None:
        self.sock_path = Path(sock_path)
        self.lock_path = self.sock_path.with_suffix(".lock")

    def _exchange(self, cmd: dict[str, Any], timeout: float) -> Any:
        self.lock_path.touch(exist_ok=True)
        with open(self.lock_path) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return self._exchange_locked(cmd, timeout)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _exchange_locked(self, cmd: dict[str, Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            try:
                s.connect(str(self.sock_path))
            except OSError as e:
                raise AgentUnavailable(f"guest agent socket {self.sock_path}: {e}") from e
            reader = _Reader(s, deadline)
            sync_id = random.randint(1, 2**31 - 1)
            s.sendall(json.dumps({"execute": "guest-sync-delimited", "arguments": {"id": sync_id}}).encode())
            # Replies left by an earlier client come first: skip until our id.
            while True:
                msg = reader.next()
                if msg.get("return") == sync_id:
                    break
            s.sendall(json.dumps(cmd).encode())
            msg = reader.next()
            if "error" in msg:
                err = msg["error"]
                raise OperationFailed(f"guest agent: {err.get('class')}: {err.get('desc')}")
            return msg.get("return")
        except TimeoutError as e:
            raise AgentUnavailable(
                f"guest agent at {self.sock_path} did not answer in {timeout:.0f} s"
            ) from e
        finally:
            s.close()

    def write_file(self, path: str, src: BinaryIO, chunk: int = COPY_CHUNK) -> int:
        """Write what `src` reads to `path` in the guest (guest-file-*); returns the bytes written."""
        h = self._exchange({"execute": "guest-file-open", "arguments": {"path": path, "mode": "wb"}}, 30.0)
        n = 0
        try:
            while data := src.read(chunk):
                args = {"handle": h, "buf-b64": base64.b64encode(data).decode()}
                r = self._exchange({"execute": "guest-file-write", "arguments": args}, 120.0)
                if r.get("count") != len(data):
                    raise OperationFailed(f"guest agent wrote {r.get('count')} of {len(data)} bytes: {path}")
                n += len(data)
        finally:
            with contextlib.suppress(OperationFailed):
                self._exchange({"execute": "guest-file-close", "arguments": {"handle": h}}, 30.0)
        return n

    def ping(self, timeout: float = 3.0) -> bool:
        try:
            self._exchange({"execute": "guest-ping"}, timeout)
            return True
        except AgentUnavailable:
            return False

    def exec(
        self,
        argv: list[str],
        *,
        timeout: float = 120.0,
        input: bytes | str | None = None,
        env: list[str] | None = None,
    ) -> ExecResult:
        """Run argv inside the guest; returns its exit code and captured output."""
        args: dict[str, Any] = {"path": argv[0], "arg": list(argv[1:]), "capture-output": True}
        if input is not None:
            data = input.encode() if isinstance(input, str) else input
            args["input-data"] = base64.b64encode(data).decode()
        if env is not None:
            args["env"] = env
        started = self._exchange({"execute": "guest-exec", "arguments": args}, 30.0)
        pid = started["pid"]
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            st = self._exchange({"execute": "guest-exec-status", "arguments": {"pid": pid}}, 30.0)
            if st.get("exited"):
                out = base64.b64decode(st.get("out-data", ""))
                err = base64.b64decode(st.get("err-data", ""))
                sig = st.get("signal")
                rc = st.get("exitcode", 128 + (sig or 0))
                return ExecResult(rc=rc, stdout_bytes=out, stderr_bytes=err, signal=sig)
            if time.monotonic() > deadline:
                # Best effort: do not leave the command running behind the caller's back.
                with contextlib.suppress(OperationFailed):
                    self._exchange(
                        {"execute": "guest-exec", "arguments": {"path": "kill", "arg": ["-9", str(pid)]}},
                        10.0,
                    )
                raise CommandTimedOut(f"command {argv!r} did not finish in {timeout:.0f} s (killed)")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def exec_stream(
        self,
        argv: list[str],
        on_stdout: Callable[[bytes], None],
        on_stderr: Callable[[bytes], None],
        *,
        timeout: float = 600.0,
        input: bytes | None = None,
    ) -> int:
        """Run argv and hand its output over while it runs; returns the exit code.

        guest-exec only returns captured output at the end, so the command writes to two files
        in the guest's /run that are read as they grow (guest-file-read).
        """
        base = f"/run/nodeos-lab-exec-{random.getrandbits(48):012x}"
        args: dict[str, Any] = {
            "path": "/bin/sh",
            "arg": ["-c", 'exec "$@" >"$0.out" 2>"$0.err"', base, *argv],
            "capture-output": False,
        }
        if input is not None:
            args["input-data"] = base64.b64encode(input).decode()
        pid = self._exchange({"execute": "guest-exec", "arguments": args}, 30.0)["pid"]
        handles: dict[str, int] = {}
        sinks = {".out": on_stdout, ".err": on_stderr}

        def pump() -> None:
            for suffix, sink in sinks.items():
                if suffix not in handles:
                    try:
                        handles[suffix] = self._exchange(
                            {"execute": "guest-file-open", "arguments": {"path": base + suffix, "mode": "r"}},
                            30.0,
                        )
                    except AgentUnavailable:
                        raise
                    except OperationFailed:
                        continue  # not created yet
                while True:
                    r = self._exchange(
                        {
                            "execute": "guest-file-read",
                            "arguments": {"handle": handles[suffix], "count": 65536},
                        },
                        30.0,
                    )
                    data = base64.b64decode(r.get("buf-b64", ""))
                    if data:
                        sink(data)
                    if len(data) < 65536:
                        break

        deadline = time.monotonic() + timeout
        delay = 0.05
        try:
            while True:
                st = self._exchange({"execute": "guest-exec-status", "arguments": {"pid": pid}}, 30.0)
                pump()
                if st.get("exited"):
                    pump()
                    sig = st.get("signal")
                    return int(st.get("exitcode", 128 + (sig or 0)))
                if time.monotonic() > deadline:
                    with contextlib.suppress(OperationFailed):
                        self._exchange(
                            {"execute": "guest-exec", "arguments": {"path": "kill", "arg": ["-9", str(pid)]}},
                            10.0,
                        )
                    raise CommandTimedOut(f"command {argv!r} did not finish in {timeout:.0f} s (killed)")
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)
        finally:
            with contextlib.suppress(OperationFailed):
                for h in handles.values():
                    self._exchange({"execute": "guest-file-close", "arguments": {"handle": h}}, 10.0)
                self._exchange(
                    {
                        "execute": "guest-exec",
                        "arguments": {"path": "rm", "arg": ["-f", base + ".out", base + ".err"]},
                    },
                    10.0,
                )


class _Reader:
    """Splits the agent's byte stream into JSON messages (0xFF sync bytes and blanks skipped)."""

    def __init__(self, s: socket.socket, deadline: float) -> None:
        self.s = s
        self.deadline = deadline
        self.buf = ""
        self.dec = json.JSONDecoder()

    def next(self) -> dict[str, Any]:
        while True:
            text = self.buf.lstrip(" \r\n\t\ufffd")
            if text:
                try:
                    obj, end = self.dec.raw_decode(text)
                    self.buf = text[end:]
                    if isinstance(obj, dict):
                        return obj
                    continue
                except json.JSONDecodeError:
                    pass
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.s.settimeout(left)
            chunk = self.s.recv(65536)
            if not chunk:
                raise AgentUnavailable("guest agent closed the connection")
            self.buf = text + chunk.replace(b"\xff", b"").decode(errors="replace")
