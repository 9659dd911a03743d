"""The control plane API: pools, volumes, snapshots, clones, hosts, grants and node labels.

One code path for one node and fifty (a lone node is a cluster of one): every request is
validated here, on the node whose console asked (bad input never reaches the leader), then
run at the Raft leader (here or forwarded): a read barrier, a decision from the map
(nodeos/control/decide.py), one proposed command. The agents on the chosen nodes see the
committed desired state and make their data planes match it; this node then waits, on its
own copy of the map, until the object is ready or has failed (the error names the node and
the step), or until the request's `wait` runs out.

Its parts: the common parameters (params.py), the reads at the leader (reads.py), drives and
pools (pool_api.py), published volumes (publish_api.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from nodeos import validate
from nodeos.cluster import request_log
from nodeos.cluster.errors import NotLeader, OutcomeUnknown, remote_error
from nodeos.cluster.map import encode_command
from nodeos.control import decide, host_api, pool_api, progress, publish_api, views
from nodeos.control.params import param, wait_param
from nodeos.control.reads import READS
from nodeos.daemon.service import DaemonContext, Handler
from nodeos.errors import BadInput, NotSupported, OperationFailed
from nodeos.node import crash
from nodeos.storage import pool_index
from nodeos.storage.lookup import ref_by_name, snapshot_by_name, volume_by_name
from nodeos.storage.storage_map import check_labels, label_conflicts

LOG = logging.getLogger("nodeosd.control")
LEADER_TIMEOUT_S = 15.0


class ControlService:
    name = "control"

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self.cluster: Any = None
        self.failover: Any = None
        self.lease: Any = None

    # --- Service protocol -----------------------------------------------------------------

    def methods(self) -> dict[str, Handler]:
        return {
            **pool_api.PoolApi(self).methods(),
            "pool.list": self.reader("pool.list"),
            "volume.create": self.volume_create,
            "volume.list": self.reader("volume.list"),
            "volume.show": self.volume_show,
            "volume.resize": self.volume_resize,
            "volume.delete": self.volume_delete,
            "volume.snapshot": self.volume_snapshot,
            "volume.clone": self.volume_clone,
            "volume.grant": self.volume_grant,
            "volume.revoke": self.volume_revoke,
            **publish_api.PublishApi(self).methods(),
            **host_api.HostApi(self).methods(),
            "host.list": self.reader("host.list"),
            "host.remove": self.host_remove,
            "node.list": self.reader("node.list"),
            "node.show": self.node_show,
            "node.label": self.node_label,
            "node.drain": self.node_drain,
            "node.undrain": self.node_undrain,
            "node.rebuild_limit": self.node_rebuild_limit,
        }

    async def start(self) -> None:
        self.cluster = self.ctx.services.get("cluster")
        if self.cluster is None:
            raise OperationFailed("the control plane needs the cluster service", field="cluster")
        self.cluster.leader_handlers["control"] = self._at_leader
        from nodeos.control.failover_loop import FailoverLoop
        from nodeos.storage.failover import LeaseTiming
        from nodeos.storage.replace import DEFAULT_REPLACE_AFTER_S, ReplacePolicy

        lease_s = float(self.ctx.config.get("lease_s") or LeaseTiming().lease_s)
        after_s = float(self.ctx.config.get("replace_after_s") or DEFAULT_REPLACE_AFTER_S)
        self.failover = FailoverLoop(self.cluster, LeaseTiming(lease_s), ReplacePolicy(after_s=after_s))
        self.failover.start()
        from nodeos.agent.lease import LeaseKeeper

        self.lease = LeaseKeeper(
            self.cluster, self._fence, LeaseTiming(lease_s), self._dataplane_down, self._reports_in_flight
        )
        self.lease.start()

    def _dataplane_down(self) -> str | None:
        fn = getattr(self.ctx.services.get("node"), "dataplane_down", None)
        return fn() if callable(fn) else None

    def _reports_in_flight(self) -> list[Any]:
        """The agent's reports that may not have landed yet (nodeos/agent/legs.py `Sent`)."""
        agent = getattr(self.ctx.services.get("node"), "agent", None)
        return list(getattr(agent, "sent", None) or [])

    async def _fence(self, fenced: bool, keep: frozenset[str] = frozenset()) -> list[str]:
        """The node's primaries refuse I/O (fenced; but those in `keep`) or serve again; a node
        without a data plane has nothing to fence."""
        node = self.ctx.services.get("node")
        set_fenced = getattr(node, "set_fenced", None)
        if set_fenced is None or not getattr(node, "has_dataplane", False):
            return []
        return list(await set_fenced(fenced, keep))

    async def stop(self) -> None:
        if self.lease is not None:
            await self.lease.stop()
        if self.failover is not None:
            await self.failover.stop()
        if self.cluster is not None:
            self.cluster.leader_handlers.pop("control", None)

    def status(self) -> dict[str, Any]:
        d = self._driver_or_none()
        if d is None:
            return {}
        st = d.map.state
        return {
            "pools": sum(1 for p in st["pools"].values() if p["node"] == d.id),
            "volumes": len(st["volumes"]),
            "snapshots": len(st["snapshots"]),
            "hosts": len(st["hosts"]),
            "lease": self.lease.status() if self.lease is not None else None,
        }

    # --- plumbing -------------------------------------------------------------------------

    def _driver_or_none(self) -> Any:
        return getattr(self.cluster, "driver", None)

    def _map(self) -> dict[str, Any]:
        d = self._driver_or_none()
        if d is None:
            raise OperationFailed("the cluster service is not running on this node", field="cluster")
        return d.map.state

    def _me(self) -> int:
        return int(self.cluster.driver.id)

    def _local_dataplane(self) -> bool:
        return self.ctx.dataplane is not None and getattr(self.ctx.dataplane, "name", "none") != "none"

    def _need_storage(self, lookup: Callable[[dict[str, Any]], Any] | None = None) -> None:
        """A node without a data plane can still run the console for its cluster, as long as
        the cluster has a storage node; alone, it says why nothing can be stored. `lookup`: the
        object the request names, looked up first (on this node's map, as the leader would):
        a name that does not exist is bad input wherever it is asked (exit 2, not 1)."""
        if self._local_dataplane():
            return
        d = self._driver_or_none()
        st = d.map.state if d is not None else {"reports": {}}
        storage = [
            r for r in st["reports"].values() if (r.get("dataplane") or {}).get("name") not in (None, "none")
        ]
        if not storage:
            if lookup is not None and d is not None:
                lookup(st)
            raise NotSupported(
                f"this node runs without a data plane ({self.ctx.dataplane_reason}) and no storage node "
                "is in its cluster: pools and volumes live on storage nodes",
                field="dataplane",
            )

    async def _run(self, op: str, params: dict[str, Any]) -> Any:
        if op in READS:
            return await self.cluster.at_leader(
                "control", {"op": op, "params": params}, LEADER_TIMEOUT_S, idempotent=True
            )
        out = await self._write_once(op, params)
        # Read your writes: this node's own map (what the waits below poll) may trail the
        # leader's; wait until it has applied the command's entry.
        index = int(out["index"])
        deadline = time.monotonic() + LEADER_TIMEOUT_S
        while self._map()["applied_index"] < index:
            if time.monotonic() >= deadline:
                raise OutcomeUnknown(f"committed at index {index}, but this node has not applied it yet")
            await self._map_changed(0.02)
        return out["result"]

    async def _write_once(self, op: str, params: dict[str, Any]) -> Any:
        """Run a write at the leader; when its outcome is unknown (the leader changed, the link
        to it dropped), ask again with the same request id: the map applies an id once and
        answers a repeat from its record (nodeos/cluster/request_log.py), so the operator gets
        the one outcome instead of "may or may not be applied"."""
        req = {"op": op, "params": params, "rid": uuidlib.uuid4().hex}
        deadline = time.monotonic() + 2 * LEADER_TIMEOUT_S
        unknown: OutcomeUnknown | None = None  # an attempt that may have been applied
        while True:
            attempt = min(LEADER_TIMEOUT_S, deadline - time.monotonic())
            try:
                return await self.cluster.at_leader("control", req, max(1.0, attempt))
            except OutcomeUnknown as err:
                unknown = err
            except NotLeader:
                if unknown is None:
                    raise  # nothing sent could have been applied: "nothing done" is true
            if deadline - time.monotonic() < 1.0:
                raise unknown
            LOG.info("%s: outcome unknown (%s); asking the leader again", op, unknown.message)
            await asyncio.sleep(0.2)

    def reader(self, op: str) -> Handler:
        async def handler(params: dict[str, Any]) -> Any:
            return await self._run(op, {})

        return handler

    async def _at_leader(self, d: Any, params: dict[str, Any], timeout: float) -> Any:
        """Runs on the leader: read barrier, decide from the map, propose."""
        op, p = params.get("op"), params.get("params") or {}
        rid = None if params.get("rid") is None else request_log.check_id(params["rid"])
        await d.read_barrier(min(timeout, 5.0))
        st = d.map.state
        if op in READS:
            return READS[op](st, p, d)
        seen = None if rid is None else request_log.recorded(st, rid)
        if seen is not None:  # an earlier attempt committed: its outcome, not a second decision
            if "error" in seen:
                raise remote_error(seen["error"])
            return {"result": seen.get("result"), "index": seen["index"]}
        fn = decide.WRITES.get(str(op))
        if fn is None:
            raise BadInput(f"unknown control operation {op!r}", field="method")
        # Secrets sealed here, before the command is proposed: the Raft log, its snapshots and
        # every member's map hold only the sealed form (nodeos/cluster/datakey.py).
        p = await host_api.seal_at_leader(self.cluster, d, str(op), p)
        with pool_index.deciding_on(d.map):  # placement reads the map's index, not every volume
            if op in decide.NEEDS_ID:
                new_id = ("p" + uuidlib.uuid4().hex[:16]) if op == "pool.create" else str(uuidlib.uuid4())
                cmd, args = fn(st, p, new_id)
            else:
                cmd, args = fn(st, p)
        v = host_api.command_version(cmd, args)
        result = await d.propose(encode_command(cmd, args, v, rid=rid), max(1.0, timeout - 0.5))
        return {"result": result, "index": d.map.applied_index}

    async def _wait(self, check: Any, wait: float, what: str | Callable[[dict[str, Any]], str]) -> Any:
        """Poll this node's own copy of the map until `check(state)` returns non-None. `what`
        (or what it says of the map, nodeos/control/progress.py) names the wait when it ends."""
        deadline = time.monotonic() + wait
        while True:
            out = check(self._map())
            if out is not None:
                return out
            if time.monotonic() >= deadline:
                said = what(self._map()) if callable(what) else what
                raise OperationFailed(
                    f"{said}: still not done after {wait:.0f} s (it goes on; see `nodeos status`)"
                )
            await self._map_changed(0.1)

    async def _map_changed(self, timeout: float) -> None:
        """Until this node's map changes beyond its key-value store, at most `timeout`."""
        d = self._driver_or_none()
        if d is None:
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await d.map_changed.wait()

    # --- volumes --------------------------------------------------------------------------

    async def _wait_volume(self, name: str, wait: float) -> dict[str, Any]:
        """Wait until volume/snapshot `name` is ready; `wait` 0: return its view at once (the
        console then shows progress itself)."""
        if wait == 0:
            await self._wait(lambda st: True if name in st["names"] else None, 10.0, f"volume {name}")
            st = self._map()
            ref = st["names"][name]
            if ref["kind"] == "snapshot":
                return views.snapshot_view(st, st["snapshots"][ref["uuid"]])
            return views.volume_view(st, st["volumes"][ref["uuid"]])

        def done(st: dict[str, Any]) -> Any:
            ref = st["names"].get(name)
            if ref is None:
                raise OperationFailed(
                    f"{name!r} disappeared (a snapshot that could not be taken at its moment is dropped; "
                    "see nodeos events and the nodes' logs)",
                    field="name",
                )
            if ref["kind"] == "snapshot":
                snap = st["snapshots"][ref["uuid"]]
                if snap["state"] == "failed":
                    raise OperationFailed(f"snapshot {name!r}: {snap.get('error') or 'failed'}", field="name")
                return views.snapshot_view(st, snap) if snap["state"] == "ready" else None
            vol = st["volumes"][ref["uuid"]]
            if vol["state"] == "failed":
                raise OperationFailed(
                    f"volume {name!r} could not be created: {vol.get('error')}", field="name"
                )
            return views.volume_view(st, vol) if vol["state"] == "ready" else None

        return await self._wait(done, wait, f"volume {name}")

    # Handlers get requests the dispatcher has checked against their types (nodeos/api/): what
    # is left here is what needs the map or more than one field.

    async def volume_create(self, params: dict[str, Any]) -> dict[str, Any]:
        req = {
            "name": params["name"],
            "size": validate.size(params["size"], "size"),  # "10GiB" -> bytes
            "pool": params.get("pool"),
            "replicas": params.get("replicas") or 1,
            "spread": params.get("spread") or "node",
            "qos_iops": params.get("qos_iops"),
            "qos_mbps": params.get("qos_mbps"),
        }
        wait = wait_param(params)
        self._need_storage()
        if (req["qos_iops"] or req["qos_mbps"]) and not self._qos_everywhere():
            raise NotSupported(
                "QoS limits are not supported by the kernel data plane",
                field="qos_iops" if req["qos_iops"] else "qos_mbps",
            )
        await self._run("volume.create", req)
        LOG.info("volume %s placed", req["name"])
        return await self._wait_volume(req["name"], wait)

    def _qos_everywhere(self) -> bool:
        st = self._map()
        reps = [
            r for r in st["reports"].values() if (r.get("dataplane") or {}).get("name") not in (None, "none")
        ]
        return bool(reps) and all((r.get("dataplane") or {}).get("qos") for r in reps)

    async def volume_clone(self, params: dict[str, Any]) -> dict[str, Any]:
        req = {"snapshot": params["snapshot"], "name": params["name"], "replicas": params.get("replicas")}
        wait = wait_param(params)
        self._need_storage(lambda st: snapshot_by_name(st, req["snapshot"]))
        await self._run("volume.clone", req)
        return await self._wait_volume(req["name"], wait)

    async def volume_show(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._run("volume.show", {"name": params["name"]})

    async def volume_resize(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["name"]
        size = validate.size(params["size"], "size")  # "10GiB" -> bytes
        wait = wait_param(params)
        self._need_storage(lambda st: volume_by_name(st, name))
        await self._run("volume.resize", {"name": name, "size": size})

        def done(st: dict[str, Any]) -> Any:
            vol = st["volumes"][st["names"][name]["uuid"]]
            reps = [
                (st["reports"].get(s["node"]) or {}).get("replicas", {}).get(vol["uuid"]) or {}
                for s in vol["placement"]
            ]
            ok = all(int(r.get("size_bytes") or 0) >= size for r in reps)
            return views.volume_view(st, vol) if ok else None

        return await self._wait(done, wait, f"resizing volume {name}")

    async def volume_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["name"]
        wait = wait_param(params)
        ref = self._map()["names"].get(name)
        kind = "snapshot" if ref and ref["kind"] == "snapshot" else None
        self._need_storage(lambda st: ref_by_name(st, name))
        await self._run("volume.delete", {"name": name, "force": bool(params.get("force", False))})
        if kind is None:
            kind = self._map()["volumes"].get((ref or {}).get("uuid"), {}).get("kind", "volume")
        gone = lambda st: True if name not in st["names"] else None  # noqa: E731
        await self._wait(gone, wait, lambda st: progress.deleting(st, name))
        LOG.info("%s %s deleted", kind, name)
        return {"name": name, "deleted": True, "kind": kind}

    async def volume_snapshot(self, params: dict[str, Any]) -> dict[str, Any]:
        name, snap = params["name"], params["snapshot"]
        wait = wait_param(params)
        self._need_storage(lambda st: volume_by_name(st, name))
        await self._run("volume.snapshot", {"name": name, "snapshot": snap})
        return await self._wait_volume(snap, wait)

    async def _hosts(self, op: str, params: dict[str, Any]) -> dict[str, Any]:
        name = params["name"]
        if params.get("hosts") is not None:  # several in one map command (a fleet)
            who: dict[str, Any] = {"hosts": list(dict.fromkeys(params["hosts"]))}
            host = f"{len(who['hosts'])} hosts"
        else:
            host = param(params, "host")  # one of host and hosts
            who = {"host": host}
        wait = wait_param(params)
        self._need_storage(lambda st: ref_by_name(st, name))
        out = await self._run(op, {"name": name, **who})

        def applied(st: dict[str, Any]) -> Any:
            if st["names"][name]["kind"] == "published":
                return publish_api.grants_applied(st, name)
            return views.grants_in_force(st, st["volumes"][st["names"][name]["uuid"]])

        await self._wait(applied, wait, f"{op} {name} {host}")
        LOG.info("%s %s host %s", op, name, host)
        return out

    async def volume_grant(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._hosts("volume.grant", params)

    async def volume_revoke(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._hosts("volume.revoke", params)

    # --- hosts and nodes ------------------------------------------------------------------

    async def host_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        out = await self._run("host.remove", {"nqn": params["nqn"]})
        crash.point("host.remove:done")
        return out

    async def node_show(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._run("node.show", {"node": params["node"]})

    async def node_label(self, params: dict[str, Any]) -> dict[str, Any]:
        ref = params["node"]
        set_ = params.get("set") or {}
        remove = params.get("remove") or []
        if not set_ and not remove:
            raise BadInput("give at least one KEY=VALUE or KEY-", field="labels")
        check_labels(set_, remove)
        label_conflicts(set_, remove)
        return await self._run("node.label", {"node": ref, "set": set_, "remove": remove})

    async def node_drain(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._run("node.drain", {"node": params["node"]})

    async def node_rebuild_limit(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._run("node.rebuild_limit", {"node": params["node"], "mbps": params.get("mbps")})

    async def node_undrain(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self._run("node.undrain", {"node": params["node"]})


def create_service(ctx: DaemonContext) -> ControlService:
    return ControlService(ctx)
