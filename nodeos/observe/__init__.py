"""Observability: Prometheus metrics, the event log (docs/observability.md)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("nodeosd.observe")


def create_service(ctx: Any) -> Any:
    """The daemon's factory: stays out (with a log line) where prometheus_client is missing."""
    try:
        from nodeos.observe.service import create_service as create
    except ModuleNotFoundError as exc:
        if exc.name != "prometheus_client":
            raise
        log.warning("prometheus_client is not installed: no /metrics and no events.list")
        return None
    return create(ctx)
