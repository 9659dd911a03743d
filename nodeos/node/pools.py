"""Drive and pool handlers of the node service."""

from __future__ import annotations

from typing import Any

from nodeos import validate
from nodeos.daemon.logsetup import fields
from nodeos.errors import AlreadyExists, NotFound, OperationFailed

from . import model
from .base import LOG, NodeBase, _param


class PoolsMixin(NodeBase):
    # --- drives and pools -------------------------------------------------------------

    async def drive_list(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        used = self._used_drives()
        return [dict(d, pool=used.get(d["id"])) for d in (await self._drives()).values()]

    async def pool_create(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        requested = validate.drive_ids(_param(params, "drives"), "drives")
        self._need_dataplane()
        async with self.lock:
            if self._get("pools", name) is not None:
                raise AlreadyExists(f"pool {name!r} already exists", field="name")
            chosen = model.pick_drives(requested, await self._drives(), self._used_drives())
            pool = model.new_pool(name, chosen)
            await self.ops.run("pool.create", {"name": name}, lambda txn: txn.put("pools", name, pool))
        LOG.info("pool %s created on %s", name, ", ".join(pool["drives"]), extra=fields(pool=name))
        return await self._pool_view(self._get("pools", name) or pool)

    async def _pool_view(self, p: dict[str, Any], cap: dict[str, Any] | None = None) -> dict[str, Any]:
        if cap is None and self.has_dataplane:
            cap = {i.pool_id: i for i in await self.ops.call("list_pools")}
        info = (cap or {}).get(p["pool_id"])
        return {
            "name": p["name"],
            "state": p["state"],
            "drives": p["drives"],
            "size_bytes": info.size_bytes if info else p.get("size_bytes", 0),
            "free_bytes": info.free_bytes if info else None,
        }

    async def pool_list(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        cap = {i.pool_id: i for i in await self.ops.call("list_pools")} if self.has_dataplane else {}
        return [await self._pool_view(p, cap) for p in self._all("pools").values()]

    async def pool_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        self._need_dataplane()
        async with self.lock:
            pool = self._get("pools", name)
            if pool is None:
                raise NotFound(f"pool {name!r} does not exist", field="name")
            users = [v["name"] for v in self._all("volumes").values() if v["pool"] == name]
            users += [s["name"] for s in self._all("snapshots").values() if s["pool"] == name]
            if users:
                raise OperationFailed(
                    f"pool {name!r} still holds {', '.join(sorted(users))}; delete them first", field="name"
                )
            await self.ops.run(
                "pool.delete",
                {"name": name},
                lambda txn: txn.put("pools", name, dict(pool, state="deleting")),
            )
        return {"name": name, "deleted": True}
