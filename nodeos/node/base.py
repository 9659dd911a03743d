"""What the node service's handler groups (pools, hosts, volumes) share: state access."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeos.daemon.service import DaemonContext
from nodeos.errors import BadInput, NotSupported

from . import inventory
from .ops import Ops

LOG = logging.getLogger("nodeosd.node")


def _param(params: dict[str, Any], key: str, field: str | None = None) -> Any:
    """A required request parameter; missing is bad input naming the field."""
    if params.get(key) is None:
        raise BadInput(f"{field or key} is required", field=field or key)
    return params[key]


class NodeBase:
    ctx: DaemonContext
    store: Any
    dp: Any
    lock: asyncio.Lock
    ops: Ops

    @property
    def has_dataplane(self) -> bool:
        return self.dp is not None and getattr(self.dp, "name", "none") != "none"

    def _need_dataplane(self) -> None:
        if not self.has_dataplane:
            raise NotSupported(
                f"this node runs without a data plane ({self.ctx.dataplane_reason}): "
                "pools and volumes live on storage nodes",
                field="dataplane",
            )

    def _all(self, db: str) -> dict[str, dict[str, Any]]:
        with self.store.read() as txn:
            return {k.decode(): v for k, v in txn.items(db)}

    def _get(self, db: str, key: str) -> dict[str, Any] | None:
        with self.store.read() as txn:
            return txn.get(db, key)

    async def _drives(self) -> dict[str, dict[str, Any]]:
        drives = await asyncio.to_thread(inventory.list_drives)
        return {d["id"]: d for d in drives}

    def _used_drives(self) -> dict[str, str]:
        return {d: p["name"] for p in self._all("pools").values() for d in p.get("drives", [])}
