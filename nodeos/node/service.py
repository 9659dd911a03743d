"""The local node service: the API of pools, volumes, snapshots, clones, hosts and grants.

Each handler validates its whole request first (nothing changes on bad input), then runs the
change as a durable operation (ops.Ops: intent -> data plane -> final state). Mutations are
serialized by one lock: on one node they also share one data plane worker thread, so the
lock costs nothing and keeps "validate, then record" atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from nodeos import validate
from nodeos.daemon.logsetup import fields
from nodeos.daemon.service import DaemonContext, Handler
from nodeos.errors import AlreadyExists, BadInput, NotFound, NotSupported, OperationFailed

from . import crash, inventory, model
from .base import LOG, _param
from .hosts import HostsMixin
from .ops import Ops
from .pools import PoolsMixin

RETRY_INTERVAL_S = 30.0
STARTUP_RECONCILE_TRIES = 12
STARTUP_RECONCILE_PAUSE_S = 5.0


def create_service(ctx: DaemonContext) -> NodeService:
    return NodeService(ctx)


class NodeService(PoolsMixin, HostsMixin):
    name = "node"

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.dp = ctx.dataplane
        self.lock = asyncio.Lock()
        self.describe: dict[str, Any] = {}
        self._listeners: tuple[Any, ...] = ()
        self.recovery: list[dict[str, Any]] = []
        self.reconcile_report: dict[str, Any] = {}
        self._retry_task: asyncio.Task[None] | None = None
        self.ops = Ops(self.store, self.dp, self._run_blocking, lambda: self._listeners)

    async def _run_blocking(self, fn: Any, *args: Any) -> Any:
        assert self.ctx.run_blocking is not None
        return await self.ctx.run_blocking(fn, *args)

    def methods(self) -> dict[str, Handler]:
        return {
            "drive.list": self.drive_list,
            "pool.create": self.pool_create,
            "pool.list": self.pool_list,
            "pool.delete": self.pool_delete,
            "volume.create": self.volume_create,
            "volume.list": self.volume_list,
            "volume.show": self.volume_show,
            "volume.resize": self.volume_resize,
            "volume.delete": self.volume_delete,
            "volume.snapshot": self.volume_snapshot,
            "volume.clone": self.volume_clone,
            "volume.grant": self.volume_grant,
            "volume.revoke": self.volume_revoke,
            "host.add": self.host_add,
            "host.list": self.host_list,
            "host.remove": self.host_remove,
            "node.reconcile": self.node_reconcile,
            "node.crash_points": self.crash_points,
        }

    # --- life cycle -------------------------------------------------------------------

    async def start(self) -> None:
        if not self.has_dataplane:
            return
        self.describe = dict(await self._run_blocking(self.dp.describe))  # type: ignore[union-attr]
        transports = [str(t) for t in self.describe.get("transports", ["tcp"])]  # type: ignore[union-attr]
        addrs = self.ctx.storage_addresses
        rdma = await asyncio.to_thread(inventory.rdma_addresses, addrs) if "rdma" in transports else set()
        self._listeners = model.listeners(addrs, transports, rdma)
        if not self._listeners:
            LOG.warning("no storage address to export on; set --storage-address")
        async with self.lock:
            self.recovery = await self.ops.recover()
            # Right after boot the drives or their LVM volumes may not be there yet: try
            # again for a while before reporting ready (the retry loop keeps trying after).
            for _ in range(STARTUP_RECONCILE_TRIES):
                rep = await self._reconcile()
                if not rep["errors"] and not rep["missing"]:
                    break
                await asyncio.sleep(STARTUP_RECONCILE_PAUSE_S)
        self._retry_task = asyncio.create_task(self._retry_loop())

    async def stop(self) -> None:
        if self._retry_task is not None:
            self._retry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retry_task

    async def _retry_loop(self) -> None:
        while True:
            await asyncio.sleep(RETRY_INTERVAL_S)
            if self.ops.pending() and not self.lock.locked():
                async with self.lock:
                    self.recovery = (self.recovery + await self.ops.recover())[-50:]
            rep = self.reconcile_report
            if (rep.get("errors") or rep.get("missing")) and not self.lock.locked():
                async with self.lock:
                    await self._reconcile()

    async def _reconcile(self) -> dict[str, Any]:
        """Make the data plane match the records after a restart (configfs and SPDK forget
        their exports on reboot): re-attach pools, re-apply exports, drop exports of ours that
        no volume wants. A ready volume missing from the data plane is reported, never
        re-created empty."""
        rep: dict[str, Any] = {
            "pools_attached": [],
            "exports_applied": 0,
            "exports_removed": [],
            "missing": [],
            "errors": [],
        }
        with self.store.read() as txn:
            pools = {k.decode(): v for k, v in txn.items("pools")}
            vols = {k.decode(): v for k, v in txn.items("volumes")}
        try:
            have_pools = {p.pool_id for p in await self.ops.call("list_pools")}
            for p in pools.values():
                if p["state"] == "ready" and p["pool_id"] not in have_pools:
                    await self.ops.call("create_pool", p["pool_id"], list(p["devices"]))
                    rep["pools_attached"].append(p["name"])
            have_vols = {v.vol_id for v in await self.ops.call("list_volumes", None)}
            wanted: set[str] = set()
            for v in vols.values():
                if v["state"] != "ready":
                    continue
                if v["vol_id"] not in have_vols:
                    rep["missing"].append(v["name"])
                    continue
                wanted.add(v["nqn"])
                await self.ops.call("apply_export", self.ops.spec_for(v))
                rep["exports_applied"] += 1
            for e in await self.ops.call("list_exports"):
                if e.nqn.startswith(model.NQN_PREFIX) and e.nqn not in wanted:
                    await self.ops.call("remove_export", e.nqn)
                    rep["exports_removed"].append(e.nqn)
        except Exception as err:
            LOG.error("reconcile failed: %s", err)
            rep["errors"].append(str(err))
        if rep["missing"]:
            LOG.error("volumes missing from the data plane: %s", ", ".join(rep["missing"]))
        self.reconcile_report = rep
        return rep

    def status(self) -> dict[str, Any]:
        with self.store.read() as txn:
            counts = {db: sum(1 for _ in txn.items(db)) for db in ("pools", "volumes", "snapshots", "hosts")}
            pending = [
                {"seq": v["seq"], "op": v["op"], "name": v["data"].get("name")}
                for _, v in txn.items("intents")
            ]
        return {
            **counts,
            "listeners": model.listeners_json(self._listeners),
            "pending_intents": pending,
            "recovery": self.recovery[-20:],
            "reconcile": self.reconcile_report,
        }

    # --- reading state ----------------------------------------------------------------

    async def _connected(self, nqn: str) -> list[str]:
        info_fn = getattr(self.dp, "export_info", None)
        if info_fn is not None:
            info = await self.ops.call("export_info", nqn)
            return list(info.connected_hosts) if info is not None else []
        for e in await self.ops.call("list_exports"):
            if e.nqn == nqn:
                return list(e.connected_hosts)
        return []

    def _connections_visible(self) -> bool:
        """Whether the data plane reports live host connections. The kernel target shows them
        only through nvmet's debugfs (CONFIG_NVME_TARGET_DEBUGFS), which not every kernel has."""
        seen = self.describe.get("connections_visible")
        if seen is not None:
            return bool(seen)
        if getattr(self.dp, "name", "") == "kernel":
            return Path("/sys/kernel/debug/nvmet").is_dir()
        return True

    def _name_free(self, name: str, field: str = "name") -> None:
        if self._get("volumes", name) is not None or self._get("snapshots", name) is not None:
            raise AlreadyExists(f"a volume or snapshot named {name!r} already exists", field=field)

    def _volume(self, name: str, field: str = "name", *, ready: bool = True) -> dict[str, Any]:
        vol = self._get("volumes", name)
        if vol is None:
            raise NotFound(f"volume {name!r} does not exist", field=field)
        if ready and vol["state"] != "ready":
            raise OperationFailed(
                f"volume {name!r} is {vol['state']}: an interrupted operation is pending (see nodeos status)",
                field=field,
            )
        return vol

    # --- volumes ----------------------------------------------------------------------

    async def volume_create(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        size = validate.size(_param(params, "size"), "size")
        pool_name = validate.name(params["pool"], "pool") if params.get("pool") is not None else None
        qi = validate.qos_iops(params.get("qos_iops"))
        qm = validate.qos_mbps(params.get("qos_mbps"))
        self._need_dataplane()
        if (qi or qm) and not self.describe.get("qos"):
            raise NotSupported(
                f"QoS limits are not supported by the {self.dp.name} data plane",  # type: ignore[union-attr]
                field="qos_iops" if qi else "qos_mbps",
            )
        async with self.lock:
            self._name_free(name)
            cap = {i.pool_id: (i.size_bytes, i.free_bytes) for i in await self.ops.call("list_pools")}
            choice = model.choose_pool(self._all("pools"), cap, await self._drives(), pool_name, size)
            vol = model.new_volume(name, choice.pool, size, qos_iops=qi, qos_mbps=qm)
            await self.ops.run("volume.create", {"name": name}, lambda txn: txn.put("volumes", name, vol))
        LOG.info("volume %s created in pool %s", name, choice.pool["name"], extra=fields(volume=name))
        return await self.volume_show({"name": name})

    async def volume_clone(self, params: dict[str, Any]) -> dict[str, Any]:
        snap_name = validate.name(_param(params, "snapshot"), "snapshot")
        name = validate.name(_param(params, "name"), "name")
        self._need_dataplane()
        async with self.lock:
            snap = self._get("snapshots", snap_name)
            if snap is None:
                raise NotFound(f"snapshot {snap_name!r} does not exist", field="snapshot")
            if snap["state"] != "ready":
                raise OperationFailed(f"snapshot {snap_name!r} is {snap['state']}", field="snapshot")
            self._name_free(name)
            pool = self._get("pools", snap["pool"])
            assert pool is not None
            vol = model.new_volume(name, pool, snap["size_bytes"], kind="clone", origin=snap_name)
            await self.ops.run(
                "volume.clone",
                {"name": name, "snap_id": snap["snap_id"]},
                lambda txn: txn.put("volumes", name, vol),
            )
        return await self.volume_show({"name": name})

    async def volume_list(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        out = [
            {
                "name": v["name"],
                "kind": v["kind"],
                "pool": v["pool"],
                "size_bytes": v["size_bytes"],
                "state": v["state"],
                "nqn": v["nqn"],
                "vol_id": v["vol_id"],
                "hosts": list(v.get("hosts", [])),
                "origin": v.get("origin"),
            }
            for v in self._all("volumes").values()
        ]
        out += [
            {
                "name": s["name"],
                "kind": "snapshot",
                "pool": s["pool"],
                "size_bytes": s["size_bytes"],
                "state": s["state"],
                "nqn": None,
                "vol_id": s["snap_id"],
                "hosts": [],
                "origin": s["volume"],
            }
            for s in self._all("snapshots").values()
        ]
        return sorted(out, key=lambda r: r["name"])

    async def volume_show(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        vol = self._get("volumes", name)
        if vol is None:
            snap = self._get("snapshots", name)
            if snap is None:
                raise NotFound(f"volume {name!r} does not exist", field="name")
            return {**snap, "kind": "snapshot", "listeners": [], "nqn": None}
        connected: list[str] = []
        if self.has_dataplane and vol["state"] == "ready":
            with contextlib.suppress(Exception):
                connected = await self._connected(vol["nqn"])
        keep = (
            "name",
            "uuid",
            "vol_id",
            "nqn",
            "nguid",
            "serial",
            "pool",
            "size_bytes",
            "state",
            "kind",
            "origin",
            "hosts",
            "qos_iops",
            "qos_mbps",
            "created",
        )
        out = {k: vol.get(k) for k in keep}
        out["listeners"] = model.listeners_json(self._listeners) if vol["state"] == "ready" else []
        out["connected_hosts"] = connected
        out["snapshots"] = sorted(s["name"] for s in self._all("snapshots").values() if s["volume"] == name)
        return out

    async def volume_resize(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        size = validate.size(_param(params, "size"), "size")
        self._need_dataplane()
        async with self.lock:
            vol = self._volume(name)
            if size < vol["size_bytes"]:
                raise BadInput(
                    f"volume {name!r} is {vol['size_bytes']} bytes; volumes only grow "
                    "(shrinking would cut off data)",
                    field="size",
                    allowed=f">= {vol['size_bytes']} bytes",
                )
            if size > vol["size_bytes"]:
                cap = {i.pool_id: i for i in await self.ops.call("list_pools")}
                pinfo = cap.get(vol["pool_id"])
                if pinfo is not None and size > pinfo.size_bytes:
                    raise BadInput(
                        f"size of {size} bytes is larger than pool {vol['pool']!r}",
                        field="size",
                        allowed=f"<= {pinfo.size_bytes} bytes",
                    )
                await self.ops.run(
                    "volume.resize",
                    {"name": name, "size_bytes": size},
                    lambda txn: txn.put("volumes", name, dict(vol, state="resizing")),
                )
        return await self.volume_show({"name": name})

    async def volume_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        force = bool(params.get("force", False))
        self._need_dataplane()
        async with self.lock:
            snap = self._get("snapshots", name)
            if snap is not None and self._get("volumes", name) is None:
                clones = [v["name"] for v in self._all("volumes").values() if v.get("origin") == name]
                if clones and not force:
                    raise OperationFailed(
                        f"snapshot {name!r} is the origin of {', '.join(clones)}; "
                        "use --force to delete it anyway",
                        field="name",
                    )
                await self.ops.run(
                    "snapshot.delete",
                    {"name": name},
                    lambda txn: txn.put("snapshots", name, dict(snap, state="deleting")),
                )
                return {"name": name, "deleted": True, "kind": "snapshot"}
            vol = self._volume(name, ready=False)
            if vol["state"] == "ready":
                connected = await self._connected(vol["nqn"])
                if connected and not force:
                    raise OperationFailed(
                        f"volume {name!r} has connected hosts ({', '.join(connected)}); "
                        "disconnect them or use --force",
                        field="name",
                    )
                if vol.get("hosts") and not force and not self._connections_visible():
                    # Blind to connections: a granted host may be connected, so play safe.
                    raise OperationFailed(
                        f"volume {name!r} may have connected hosts: it is granted to "
                        f"{', '.join(vol['hosts'])} and this data plane cannot show connections "
                        "(no nvmet debugfs); revoke the hosts or use --force",
                        field="name",
                    )
            elif not force:
                raise OperationFailed(
                    f"volume {name!r} is {vol['state']}: an operation is pending; "
                    "use --force to delete it anyway",
                    field="name",
                )
            await self.ops.run(
                "volume.delete",
                {"name": name},
                lambda txn: txn.put("volumes", name, dict(vol, state="deleting")),
            )
        LOG.info("volume %s deleted", name, extra=fields(volume=name))
        return {"name": name, "deleted": True, "kind": vol["kind"]}

    async def volume_snapshot(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        snap_name = validate.name(_param(params, "snapshot"), "snapshot")
        self._need_dataplane()
        async with self.lock:
            vol = self._volume(name)
            self._name_free(snap_name, "snapshot")
            snap = model.new_snapshot(snap_name, vol)
            await self.ops.run(
                "volume.snapshot",
                {"name": snap_name, "vol_id": vol["vol_id"]},
                lambda txn: txn.put("snapshots", snap_name, snap),
            )
        return await self.volume_show({"name": snap_name})

    async def _set_hosts(self, op: str, name: str, host: str) -> dict[str, Any]:
        self._need_dataplane()
        async with self.lock:
            vol = self._volume(name)
            if self._get("hosts", host) is None:
                raise NotFound(
                    f"host {host!r} is not registered; add it with `nodeos host add`", field="host"
                )
            old = list(vol.get("hosts", []))
            if op == "volume.grant":
                if host in old:
                    return {"name": name, "host": host, "changed": False}
                new = [*old, host]
            else:
                if host not in old:
                    raise NotFound(f"host {host!r} has no grant on volume {name!r}", field="host")
                new = [h for h in old if h != host]
            await self.ops.run(
                op,
                {"name": name, "old_hosts": old},
                lambda txn: txn.put("volumes", name, dict(vol, hosts=new, state="exporting")),
            )
        LOG.info("%s %s host %s", op, name, host, extra=fields(volume=name, host=host))
        return {"name": name, "host": host, "changed": True}

    async def volume_grant(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        host = validate.host_nqn(_param(params, "host"), "host")
        return await self._set_hosts("volume.grant", name, host)

    async def volume_revoke(self, params: dict[str, Any]) -> dict[str, Any]:
        name = validate.name(_param(params, "name"), "name")
        host = validate.host_nqn(_param(params, "host"), "host")
        return await self._set_hosts("volume.revoke", name, host)

    # --- maintenance ------------------------------------------------------------------

    async def node_reconcile(self, params: dict[str, Any]) -> dict[str, Any]:
        self._need_dataplane()
        async with self.lock:
            rec = await self.ops.recover()
            self.recovery = (self.recovery + rec)[-50:]
            return {"recovery": rec, "reconcile": await self._reconcile()}

    async def crash_points(self, params: dict[str, Any]) -> list[str]:
        return list(crash.ALL)
