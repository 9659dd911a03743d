"""Recording histories in our JSON-lines format (see history.py) from concurrent clients.

Each event is appended under a lock at the moment it happens (the invocation just before
the request is sent, the completion just after the reply arrives), so file order is a
valid real-time order, which is all the checker needs.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, TextIO


class HistoryRecorder:
    def __init__(self, path: str | Path) -> None:
        self._fh: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def _write(
        self, process: Any, type_: str, f: str, key: Any, value: Any, error: str | None = None
    ) -> None:
        event = {"process": process, "type": type_, "f": f, "key": key, "value": value}
        if error is not None:
            event["error"] = error
        line = json.dumps(event)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def invoke(self, process: Any, f: str, key: Any, value: Any = None) -> None:
        self._write(process, "invoke", f, key, value)

    def ok(self, process: Any, f: str, key: Any, value: Any = None) -> None:
        self._write(process, "ok", f, key, value)

    def fail(self, process: Any, f: str, key: Any, value: Any = None) -> None:
        """Definite failure: the op did not take effect (a cas: the value was not `from`)."""
        self._write(process, "fail", f, key, value)

    def aborted(self, process: Any, f: str, key: Any, value: Any, error: str) -> None:
        """The op certainly never ran (refused before it reached the log, daemon unreachable)."""
        self._write(process, "fail", f, key, value, error=error)

    def info(self, process: Any, f: str, key: Any, value: Any = None) -> None:
        """Unknown outcome (timeout, lost connection)."""
        self._write(process, "info", f, key, value)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
