"""Logging: journald with structured fields when running under systemd, stderr otherwise.

Structured fields travel as `extra={"fields": {"VOLUME": "v1", ...}}`; the journal gets them
as NODEOS_<KEY>= fields, stderr shows them as key=value after the message. Callers never
put secrets (DH-HMAC-CHAP keys) in messages or fields.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

LOG = logging.getLogger("nodeosd")


def under_journal() -> bool:
    """systemd sets JOURNAL_STREAM=<dev>:<ino> when stderr is connected to the journal."""
    js = os.environ.get("JOURNAL_STREAM")
    if not js:
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return js == f"{st.st_dev}:{st.st_ino}"


class _StderrFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        fields: dict[str, Any] = getattr(record, "fields", None) or {}
        if fields:
            base += " " + " ".join(f"{k.lower()}={v}" for k, v in fields.items())
        return base


class _JournalHandler(logging.Handler):
    """Adapter around python3-systemd's journal.send with our structured fields."""

    def __init__(self, journal: Any, identifier: str) -> None:
        super().__init__()
        self._journal = journal
        self._identifier = identifier

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = getattr(record, "fields", None) or {}
            extra = {f"NODEOS_{k.upper()}": str(v) for k, v in fields.items()}
            prio = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3}.get(
                record.levelno, 2
            )
            self._journal.send(
                self.format(record),
                PRIORITY=str(prio),
                SYSLOG_IDENTIFIER=self._identifier,
                LOGGER=record.name,
                CODE_FILE=record.pathname,
                CODE_LINE=record.lineno,  # python-systemd formats it with {:d}
                CODE_FUNC=record.funcName,
                **extra,
            )
        except Exception:
            self.handleError(record)


def setup(level: str = "info", identifier: str = "nodeosd") -> str:
    """Configure the root logger; returns where logs go ("journal" or "stderr")."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    if under_journal():
        try:
            from systemd import journal  # python3-systemd, present in the image

            h: logging.Handler = _JournalHandler(journal, identifier)
            h.setFormatter(logging.Formatter("%(message)s"))
            root.addHandler(h)
            return "journal"
        except ImportError:
            pass
        # Under systemd without python3-systemd: stderr lines reach the journal anyway.
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(_StderrFormatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
        return "stderr"
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(_StderrFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(h)
    return "stderr"


def fields(**kw: Any) -> dict[str, Any]:
    """`LOG.info("...", extra=fields(volume="v1"))`."""
    return {"fields": kw}
