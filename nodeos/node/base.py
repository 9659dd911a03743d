"""What the node service's parts share: its logger and read access to its own records."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeos.daemon.service import DaemonContext

from .ops import Ops

LOG = logging.getLogger("nodeosd.node")


class NodeBase:
    ctx: DaemonContext
    store: Any
    dp: Any
    lock: asyncio.Lock
    ops: Ops

    @property
    def has_dataplane(self) -> bool:
        return self.dp is not None and getattr(self.dp, "name", "none") != "none"

    def _all(self, db: str) -> dict[str, dict[str, Any]]:
        with self.store.read() as txn:
            return {k.decode(): v for k, v in txn.items(db)}

    def _get(self, db: str, key: str) -> dict[str, Any] | None:
        with self.store.read() as txn:
            return txn.get(db, key)
