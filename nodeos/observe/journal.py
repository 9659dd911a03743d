"""Events to the journal: one line each, with structured fields (NODEOS_EVENT_KIND=..., see
nodeos/daemon/logsetup.py), at the level its severity says."""

from __future__ import annotations

import logging
from typing import Any

from nodeos.daemon.logsetup import fields
from nodeos.observe import events as ev

log = logging.getLogger("nodeosd.events")
_LEVELS = {"critical": logging.ERROR, "warning": logging.WARNING}


def log_event(rec: dict[str, Any]) -> None:
    level = _LEVELS.get(str(rec.get("severity")), logging.INFO)
    log.log(level, "event %s: %s", rec["kind"], rec["message"], extra=fields(**ev.journal_fields(rec)))
