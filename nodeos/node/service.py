"""The node service: this node's data plane under durable operations, and its agent.

Desired state lives in the cluster map (nodeos/storage/storage_map.py); the API that changes
it is the control service (nodeos/control/). Here: the node's own records of what its data
plane holds (bookkeeping for reconcile), the durable operations that change the data plane
(ops.Ops: intent -> data plane -> final state), recovery of interrupted operations at start,
re-exporting after a reboot, and the agent (nodeos/agent/) that drives the operations from
the map. All data plane changes are serialized by one lock and one worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from nodeos.cluster import datakey
from nodeos.daemon.service import DaemonContext, Handler
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import NodeosError, NotSupported
from nodeos.observe.events import make_event

from . import crash, dpwatch, inventory, model
from .base import LOG, NodeBase
from .ops import Ops

RETRY_INTERVAL_S = 30.0
STARTUP_RECONCILE_TRIES = 12
STARTUP_RECONCILE_PAUSE_S = 5.0
FIRST_PASS_HOLD_S = 120.0  # the longest a start keeps its ports held for the agent's first pass
MAP_CATCH_UP_S = 30.0
FENCE_REASSERT_S = 2.0


def create_service(ctx: DaemonContext) -> NodeService:
    return NodeService(ctx)


class NodeService(NodeBase):
    name = "node"

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.dp = ctx.dataplane
        self.lock = asyncio.Lock()
        # (LMDB transaction id read at, records): see records()
        self._records: tuple[int, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] | None = None
        self.describe: dict[str, Any] = {}
        self._listeners: tuple[Any, ...] = ()
        self.recovery: list[dict[str, Any]] = []
        self.reconcile_report: dict[str, Any] = {}
        self._retry_task: asyncio.Task[None] | None = None
        self._release_task: asyncio.Task[None] | None = None
        self._fence_pending: set[str] = set()  # volumes a fence change could not reach yet
        self._fence_at = 0.0  # when the fence was last (re)applied
        self.cluster: Any = None
        self.agent: Any = None
        self.dpwatch: dpwatch.DataPlaneWatch | None = None
        self._opened: dict[tuple[str, str], str] = {}  # host secrets opened (memory only)
        self._unreadable: set[str] = set()  # hosts whose secret did not open (said once)
        self.ops = Ops(self.store, self.dp, self._run_blocking, lambda: self._listeners, self._map_hosts)
        # Start fenced: while this node was gone another may have become primary of its
        # replicated volumes; the first granted lease renewal lifts it (nodeos/agent/lease.py).
        self.ops.fenced = True

    async def _run_blocking(self, fn: Any, *args: Any) -> Any:
        assert self.ctx.run_blocking is not None
        return await self.ctx.run_blocking(fn, *args)

    def methods(self) -> dict[str, Handler]:
        return {
            "node.reconcile": self.node_reconcile,
            "node.crash_points": self.crash_points,
        }

    def _map_hosts(self) -> dict[str, dict[str, Any]]:
        d = getattr(self.cluster, "driver", None)
        return self.open_hosts(d.map.state["hosts"]) if d is not None else {}

    def open_hosts(self, hosts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The map's hosts with their sealed secrets opened under this member's data key, for
        export specs only (never a report, event or log). One that does not open is said once,
        by host and key id, in the log and the node's events; its exports fail with the reason."""
        keys = self.cluster.data_keys() if hasattr(self.cluster, "data_keys") else datakey.DataKeys(None)
        out = datakey.open_hosts(hosts, keys, self._opened)
        bad = {
            n: str(h.get("dhchap_error") or h["tls_error"])
            for n, h in out.items()
            if h.get("dhchap_error") or h.get("tls_error")
        }
        for nqn in sorted(set(bad) - self._unreadable):
            LOG.error("%s", bad[nqn])
            obs = self.ctx.services.get("observe")
            if obs is not None:
                ev = make_event("host_secret_unreadable", bad[nqn][:500], severity="critical", host=nqn)
                obs.record(ev)
        self._unreadable = set(bad)
        return out

    def records(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """This node's records: (pools, volumes, snapshots) by name. Read (and decoded) again only
        after a write transaction committed since the last read: the agent asks several times a
        pass and its leg watch every 0.2 s (at a few hundred volumes, decoding them was a fifth
        of the daemon's samples during creates). Shared between callers: read-only."""
        txn_id = self.store.last_txn_id()
        if self._records is None or self._records[0] != txn_id:
            self._records = (txn_id, (self._all("pools"), self._all("volumes"), self._all("snapshots")))
        return self._records[1]

    def listeners_json(self) -> list[dict[str, str]]:
        return model.listeners_json(self._listeners)

    async def drive_inventory(self) -> dict[str, dict[str, Any]]:
        drives = await asyncio.to_thread(inventory.list_drives, self.dp)
        keep = ("path", "model", "serial", "size_bytes", "health", "owner", "address", "usable", "unusable")
        return {d["id"]: {k: d.get(k) for k in keep} for d in drives}

    async def import_legacy_once(self, cluster: Any) -> None:
        """Upgrade: records a node kept before the map owned pools, volumes and hosts are
        brought into the map once (docs/cluster.md, "Upgrade"); nothing is re-created."""
        with self.store.read() as txn:
            if txn.get("meta", "map_import") is not None:
                return
            hosts = [h for _, h in txn.items("hosts")]
        pools, vols, snaps = self.records()
        args = {
            "node_id": cluster.driver.id,
            "pools": [p for p in pools.values() if p["state"] == "ready"],
            "volumes": [v for v in vols.values() if v["state"] == "ready"],
            "snapshots": [s for s in snaps.values() if s["state"] == "ready"],
            "hosts": hosts,
        }
        if any(args[k] for k in ("pools", "volumes", "snapshots", "hosts")):
            out = await cluster.at_leader("command", {"cmd": "import_node", "args": args}, 30.0)
            LOG.warning("upgrade: brought this node's records into the cluster map: %s", out)
        with self.store.write() as txn:
            txn.put("meta", "map_import", {"cluster_id": cluster.identity["cluster_id"]})

    # --- life cycle -------------------------------------------------------------------

    async def start(self) -> None:
        self.cluster = self.ctx.services.get("cluster")
        await self._map_caught_up()
        if self.cluster is not None:
            from nodeos.agent.agent import Agent

            self.agent = Agent(self, self.cluster)
        if not self.has_dataplane:
            if self.agent is not None:
                self.agent.start()
            return
        self.describe = dict(await self._run_blocking(self.dp.describe))  # type: ignore[union-attr]
        transports = [str(t) for t in self.describe.get("transports", ["tcp"])]  # type: ignore[union-attr]
        addrs = self.ctx.storage_addresses
        rdma = await asyncio.to_thread(inventory.rdma_addresses, addrs) if "rdma" in transports else set()
        self._listeners = model.listeners(addrs, transports, rdma)
        if not self._listeners:
            LOG.warning("no storage address to export on; set --storage-address")
        held = await self._hold_ports()
        try:
            async with self.lock:
                await self._startup_reexport()
        except BaseException:
            await self._release_ports(held)
            raise
        self._retry_task = asyncio.create_task(self._retry_loop())
        probe = dpwatch.prober(self.dp)
        if probe is not None:
            self.dpwatch = dpwatch.DataPlaneWatch(
                probe, self._expected_nqns, self._reapply, self._dataplane_changed
            )
            self.dpwatch.start()
        if self.agent is not None:
            self.agent.start()
        self._release_task = asyncio.create_task(self._release_after_first_pass(held))

    async def _map_caught_up(self) -> None:
        """Exports carry grants from the map: let the local map apply what is committed first."""
        d = getattr(self.cluster, "driver", None)
        if d is None:
            return
        target = d.node.status().hard_state.commit
        deadline = asyncio.get_running_loop().time() + MAP_CATCH_UP_S
        while d.map.applied_index < target and asyncio.get_running_loop().time() < deadline:
            if getattr(d.map, "stalled", None) is not None:
                return  # it cannot apply the log (a newer release's entry): it says so, not waits
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.dpwatch is not None:
            await self.dpwatch.stop()
        if self.agent is not None:
            await self.agent.stop()
        await cancel_and_wait(self._retry_task)
        await cancel_and_wait(self._release_task)

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

    async def _startup_reexport(self) -> None:
        """Finish what a crash interrupted, then export again what the records hold (the ports
        held meanwhile: start)."""
        self.recovery = await self.ops.recover()
        # Right after boot the drives or their LVM volumes may not be there yet: try
        # again for a while before reporting ready (the retry loop keeps trying after).
        for _ in range(STARTUP_RECONCILE_TRIES):
            rep = await self._reconcile()
            if not rep["errors"] and not rep["missing"]:
                break
            await asyncio.sleep(STARTUP_RECONCILE_PAUSE_S)

    async def _release_after_first_pass(self, held: bool) -> None:
        """A start's ports stay held from recovery's first export until the agent's first pass
        is done (at most FIRST_PASS_HOLD_S): a volume back only at a later try, or one the map
        moved while the node was away (its demote, its new front end: the agent's), is linked
        with the others, never after its port listens (_ports_held)."""
        if held and self.agent is not None and self._map_may_move_mine():
            loop, before = asyncio.get_running_loop(), self.agent.passes
            deadline = loop.time() + FIRST_PASS_HOLD_S
            while self.agent.passes == before and loop.time() < deadline:
                await asyncio.sleep(0.2)
            if self.agent.passes == before:
                LOG.warning(
                    "exports linked to their ports without the agent's first pass (%.0f s): a host's "
                    "path to a volume the map moved meanwhile may be refused until the agent makes it",
                    FIRST_PASS_HOLD_S,
                )
        async with self.lock:  # between two passes, never in the middle of a step
            await self._release_ports(held)

    def _map_may_move_mine(self) -> bool:
        """Whether the agent's first pass may have exports to make that hosts already use: this
        node is a member and holds replicated volumes (a new node's first volumes are no host's
        path yet: it need not wait)."""
        d = getattr(self.cluster, "driver", None)
        if d is None or d.id not in d.map.nodes:
            return False
        return any(int(v.get("replicas") or 1) > 1 for v in self._all("volumes").values())

    async def _reconcile_held(self) -> dict[str, Any]:
        """_reconcile with the target's ports held until it is done (_ports_held)."""
        async with self._ports_held():
            return await self._reconcile()

    @contextlib.asynccontextmanager
    async def _ports_held(self) -> AsyncIterator[None]:
        """The target's ports held while a re-export runs (a backend that can: the kernel's): a
        host reconnecting to a rebooted node meets either no listener (and retries) or every
        export the node had, never a port that refuses its volume as unknown (with DNR, which
        drops that path from a Linux host for good: the rolling upgrade's lab test saw a
        2-replica volume lose every path, one rebooted node after the other)."""
        held = await self._hold_ports()
        try:
            yield
        finally:
            await self._release_ports(held)

    async def _hold_ports(self) -> bool:
        if not hasattr(self.dp, "hold_listeners"):
            return False
        await self.ops.call("hold_listeners")
        return True

    async def _release_ports(self, held: bool) -> None:
        if not held:
            return
        try:
            await self.ops.call("release_listeners")
        except NodeosError as err:
            LOG.error("exports not linked to their ports after the re-export: %s", err.message)

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
            specs = []  # single-replica exports: re-applied together (SPDK lists once for all)
            for v in vols.values():
                if v["state"] != "ready":
                    continue
                if v["vol_id"] not in have_vols:
                    rep["missing"].append(v["name"])
                    continue
                wanted.add(v["nqn"])
                if int(v.get("replicas") or 1) > 1:
                    try:  # one replicated volume's trouble does not hold up the others
                        if await self.ops.mirrors.restore(v, current=self._epoch_current(v)):
                            rep["exports_applied"] += 1
                    except NodeosError as err:
                        LOG.error("volume %s not restored: %s", v["name"], err.message)
                        rep["errors"].append(f"{v['name']}: {err.message}")
                    continue
                specs.append(self.ops.spec_for(v))
            await self.ops.call("reapply_exports", specs)
            rep["exports_applied"] += len(specs)
            for e in await self.ops.call("list_exports"):
                if e.nqn.startswith(model.NQN_PREFIX) and e.nqn not in wanted:
                    await self.ops.call("remove_export", e.nqn)
                    rep["exports_removed"].append(e.nqn)
        except Exception as err:
            LOG.error("reconcile failed: %s", err)
            rep["errors"].append(str(err))
            rep["failed"] = True  # not one volume's trouble: the data plane's
        if rep["missing"]:
            LOG.error("volumes missing from the data plane: %s", ", ".join(rep["missing"]))
        self.reconcile_report = rep
        return rep

    # --- the data plane watch (nodeos/node/dpwatch.py) ---------------------------------

    def dataplane_down(self) -> str | None:
        """Why the data plane is down ("since ...: reason"), None while it is up."""
        h = self.dpwatch.health if self.dpwatch is not None else None
        if h is None or h.state != "down":
            return None
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.since or 0))
        return f"data plane down since {since}: {h.reason}"

    def _expected_nqns(self) -> list[str]:
        """The subsystems the data plane must hold: every ready volume's, except those the last
        re-export found missing from the data plane (reported on their own)."""
        missing = set(self.reconcile_report.get("missing") or [])
        return [
            v["nqn"] for n, v in self._all("volumes").items() if v["state"] == "ready" and n not in missing
        ]

    async def _reapply(self) -> bool:
        """The target answers again: re-export everything (the start-up path), then let the agent
        set what it keeps applied (referrals, rebuild cap) again and report. False when the re-export
        failed as a whole (one volume's trouble is in the reconcile report, the agent's to fix)."""
        async with self.lock:
            rep = await self._reconcile_held()
        if self.agent is not None:
            self.agent.dataplane_reset()
        return not rep.get("failed")

    def _dataplane_changed(self, up: bool) -> None:
        if self.agent is not None:
            self.agent.wake.set()  # report at once

    def _epoch_current(self, v: dict[str, Any]) -> bool:
        """The map has not moved the volume's primary past this record's epoch (unknown: True)."""
        d = getattr(self.cluster, "driver", None)
        mv = d.map.state["volumes"].get(v["uuid"]) if d is not None else None
        return mv is None or int(mv.get("epoch") or 1) <= int(v.get("epoch") or 1)

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
            "dataplane_health": self.dpwatch.health.view() if self.dpwatch is not None else None,
            "stuck_calls": self.stuck_calls(),
        }

    def stuck_calls(self) -> list[dict[str, Any]]:
        """Data plane calls past their deadline, still in their worker (nodeos/daemon/lanes.py)."""
        lanes = getattr(self.ctx, "lanes", None)
        if lanes is None:
            return []
        return [{"method": c.method, "lane": c.lane, "since": int(c.started)} for c in lanes.stuck()]

    # --- maintenance ------------------------------------------------------------------

    async def node_reconcile(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self.has_dataplane:
            raise NotSupported(
                f"this node runs without a data plane ({self.ctx.dataplane_reason})", field="dataplane"
            )
        async with self.lock:
            rec = await self.ops.recover()
            self.recovery = (self.recovery + rec)[-50:]
            return {"recovery": rec, "reconcile": await self._reconcile()}

    # --- fencing (issue 9) ------------------------------------------------------------

    async def set_fenced(self, fenced: bool, keep: frozenset[str] = frozenset()) -> list[str]:
        """This node lost (True) or holds again (False) its primary lease: (re)apply the front end
        of every ready primary replicated volume, ANA inaccessible / optimized; while fenced, the
        volumes (uuids) in `keep` stay optimized (the only in-sync replica of theirs:
        nodeos/agent/lease.py `sole_primaries`). The flags stay (Ops.fenced, Ops.kept_open):
        every later front-end export (grants, recovery, promote) honours them.
        Non-replicated volumes are never fenced. Cheap when nothing changes (called often); not
        behind the node lock (a fence must not wait for a step), but data plane calls are
        serialized in the worker thread. Returns the volumes whose export changed."""
        # While fenced, re-applied every FENCE_REASSERT_S: an export the worker thread had
        # already built unfenced when the fence came may have landed after it.
        reassert = fenced and time.monotonic() - self._fence_at >= FENCE_REASSERT_S
        unchanged = fenced == self.ops.fenced and keep == self.ops.kept_open
        if unchanged and not self._fence_pending and not reassert:
            return []
        was, was_kept = self.ops.fenced, self.ops.kept_open
        self.ops.fenced, self.ops.kept_open = fenced, keep
        self._fence_at = time.monotonic()
        if not self.has_dataplane:
            return []
        if self.dataplane_down():
            # Nothing to reach: the re-export when it returns applies the fence (Ops.fenced).
            self._fence_pending = {"*"}
            return []
        changed: list[str] = []
        pending: set[str] = set()
        for name, v in self._all("volumes").items():
            if v.get("role") != "primary" or v["state"] != "ready" or int(v.get("replicas") or 1) <= 1:
                continue
            shut, was_shut = fenced and v.get("uuid") not in keep, was and v.get("uuid") not in was_kept
            if not shut and not was_shut and not {name, "*"} & self._fence_pending:
                continue  # served before, served now: nothing to re-apply
            try:
                if shut and self.dp is not None:
                    # Not queued behind a long data plane call (an attach can take a minute):
                    # the fence must land before the leader may call this node down. The same
                    # call fences after the daemon stopped (`nodeos-fence`, node/stopfence.py).
                    await asyncio.to_thread(self.dp.fence_export, v["nqn"])
                else:
                    await self.ops.call("apply_export", self.ops.spec_for(v))
                changed.append(name)
                if was_shut != shut or name in self._fence_pending:
                    how = "inaccessible (fenced)" if shut else "optimized (fence lifted)"
                    LOG.info("volume %s epoch %s: front end %s", name, v.get("epoch"), how)
            except Exception as err:  # the off-queue call raises foreign errors too
                pending.add(name)
                why = err.message if isinstance(err, NodeosError) else f"{type(err).__name__}: {err}"
                LOG.error("volume %s: fence %s not applied: %s", name, "on" if shut else "off", why)
        self._fence_pending = pending
        return changed

    async def crash_points(self, params: dict[str, Any]) -> list[str]:
        return list(crash.ALL)
