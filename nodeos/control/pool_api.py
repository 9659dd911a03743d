"""The control API of pools (drives: drive_api.py): a pool is made of whole drives of one storage node.
A collaborator of the control service: `ControlService.methods()` takes `PoolApi(service).methods()`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeos import validate
from nodeos.control import decide, views
from nodeos.control.drive_api import DriveApi
from nodeos.control.params import wait_param
from nodeos.errors import AlreadyExists, NotFound, NotSupported, OperationFailed

LOG = logging.getLogger("nodeosd.control")


class PoolApi:
    def __init__(self, control: Any) -> None:
        self.c = control

    def methods(self) -> dict[str, Any]:
        return {
            **DriveApi(self.c).methods(),  # drive.list, drive.claim, drive.release
            "pool.create": self.pool_create,
            "pool.delete": self.pool_delete,
        }

    async def _target_node(self, params: dict[str, Any]) -> tuple[int, str]:
        st = self.c._map()
        ref = params.get("node")
        if ref is None:
            return self.c._me(), views.node_name(st, self.c._me())
        nid = views.node_by_ref(st, ref)
        if nid is None:
            names = sorted(str(n.get("name")) for n in st["nodes"].values())
            raise NotFound(
                f"node {ref!r} is not a member of this cluster", field="node", allowed=names or None
            )
        return nid, views.node_name(st, nid)

    async def pool_create(self, params: dict[str, Any]) -> dict[str, Any]:
        from nodeos.node import inventory, model

        name = params["name"]
        requested = validate.drive_ids(params["drives"], "drives")  # "a,b" -> [a, b]
        wait = wait_param(params)
        nid, node = await self._target_node(params)
        st = self.c._map()
        if nid == self.c._me():
            if not self.c._local_dataplane():
                raise NotSupported(
                    f"this node runs without a data plane ({self.c.ctx.dataplane_reason}): "
                    "pools and volumes live on storage nodes",
                    field="dataplane",
                )
            drives = {
                x["id"]: x for x in await asyncio.to_thread(inventory.list_drives, self.c.ctx.dataplane)
            }
        else:
            drives = dict(((st["reports"].get(nid) or {}).get("drives")) or {})
        if f"{nid}/{name}" in st["pools"]:
            raise AlreadyExists(f"pool {name!r} already exists on {node}", field="name")
        used = {dr: p["name"] for p in st["pools"].values() if p["node"] == nid for dr in p["drives"]}
        chosen = model.pick_drives(requested, drives, used)
        req = {
            "node": nid,
            "name": name,
            "drives": [x["id"] for x in chosen],
            "devices": [x["path"] for x in chosen],
        }
        await self.c._run("pool.create", req)
        key = f"{nid}/{name}"

        def done(st: dict[str, Any]) -> Any:
            p = st["pools"].get(key)
            if p is None:
                raise OperationFailed(f"pool {name!r} on {node} is gone", field="name")
            if p["state"] == "failed":
                raise OperationFailed(
                    f"pool {name!r} on {node}: {p.get('error') or 'create failed'}", field="name"
                )
            return views.pool_view(st, p) if p["state"] == "ready" else None

        out = await self.c._wait(done, wait, f"pool {name} on {node}")
        LOG.info("pool %s created on %s", name, node)
        return out

    async def pool_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["name"]
        wait = wait_param(params)
        nid, node = await self._target_node(params)
        req = {"node": nid, "name": name}
        self.c._need_storage(lambda st: decide.pool_delete(st, req))  # a pool that is not there: exit 2
        await self.c._run("pool.delete", req)
        key = f"{nid}/{name}"
        await self.c._wait(
            lambda st: True if key not in st["pools"] else None, wait, f"deleting pool {name} on {node}"
        )
        return {"name": name, "node": node, "deleted": True}
