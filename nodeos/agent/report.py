"""The agent's report: the node's actual state, sent to the map as one `node_report` command
when it changed, at most every REPORT_MIN_INTERVAL_S, or URGENT_MIN_INTERVAL_S when an operation
waits for the change (nodeos/agent/urgency.py). A mixin of the Agent (nodeos/agent/agent.py),
whose state it reads and keeps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from nodeos.agent import onestep, urgency
from nodeos.agent.lease import reportable
from nodeos.agent.legs import in_sync_called
from nodeos.errors import NodeosError
from nodeos.node import inventory

if TYPE_CHECKING:
    from nodeos.agent.agent import Agent

LOG = logging.getLogger("nodeosd.agent")
REPORT_MIN_INTERVAL_S = 0.3
URGENT_MIN_INTERVAL_S = 0.01  # a report someone waits for (nodeos/agent/urgency.py)
DRIVES_EVERY_S = 60.0
CAP_EVERY_S = 15.0
RETRY_PAUSE_S = 5.0  # a pass whose report was not delivered is retried after it
BUSY_S = 1.0  # the agent passes quickly while a step ran or an urgent report went out this long ago
FAILOVER_STATES = ("retargeting", "promoting", "demoting")  # a replicated volume's role change


class Reporting:
    async def _report(self: Agent, d: Any) -> bool:
        """Send the node's actual state when it changed; False when it could not be delivered
        (the pass is then retried after RETRY_PAUSE_S, never at once)."""
        body = self._reportable(d, await self._report_body(d))
        # A new cluster (joined, left) or a map that lost our report (restored) gets it again.
        target = (id(d), d.id, (d.map.state["reports"].get(d.id) or {}).get("seq"))
        if body == self._last_report and target == self._last_target:
            return True
        urgent = urgency.urgent(self._last_report, body)
        spacing = URGENT_MIN_INTERVAL_S if urgent else REPORT_MIN_INTERVAL_S
        wait = self._last_report_at + spacing - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if self._driver() is not d or d.id not in d.map.nodes:
            return False  # this node joined or left a cluster meanwhile: the next pass reports there
        # The lease's standing may have changed while we waited: decided again in the same step
        # (no await) that records the report as sent, which the fence reads (nodeos/agent/lease.py).
        body = self._reportable(d, body)
        old = (d.map.state["reports"].get(d.id) or {}).get("seq", 0)
        seq = max(old, self._last_seq) + 1
        # A report that times out may still land: its seq is never reused (a later report with the
        # same seq would be dropped as stale), and what it calls in sync counts until the map holds
        # a newer one (the leg watch drops no leg it may bring back).
        self._last_seq = seq
        reps = body["replicas"].items()
        called = {u: in_sync_called(r["members"]) for u, r in reps if isinstance(r.get("members"), dict)}
        self.sent = [x for x in self.sent if x[0] > old] + [(seq, called)]
        args = {"node_id": d.id, "seq": seq, **body}
        try:
            await self.cluster.at_leader("command", {"cmd": "node_report", "args": args}, 10.0)
        except NodeosError as err:
            LOG.warning("report not delivered (%s); will retry in %.0f s", err.message, RETRY_PAUSE_S)
            return False
        self._last_report = body
        self._last_seq = seq
        self._last_target = (id(d), d.id, seq)
        self._last_report_at = time.monotonic()
        if urgent:  # progress and capacity reports alone do not keep the agent's passes quick
            self._busy_until = self._last_report_at + BUSY_S
        return True

    def _reportable(self: Agent, d: Any, body: dict[str, Any]) -> dict[str, Any]:
        """Out of the lease's standing, a primary calls no leg in sync the map does not count
        already (nodeos/agent/lease.py `reportable`). Without a lease keeper (no control plane)
        nothing is ever unfenced, so nothing needs holding back."""
        services = getattr(getattr(self.node, "ctx", None), "services", None) or {}
        keeper = getattr(services.get("control"), "lease", None)
        if keeper is None:
            return body
        standing = keeper.standing(time.monotonic(), int(d.map.state["applied_index"]))
        replicas = reportable(body["replicas"], d.map.state["volumes"], standing)
        return body if replicas is body["replicas"] else {**body, "replicas": replicas}

    async def _replica_report(self: Agent, v: dict[str, Any], remotes: list[Any]) -> dict[str, Any]:
        """One local replica as the map should see it. A secondary that exports its replica is
        "syncing" until the primary's mirror says its leg is in sync (members)."""
        usable = v["state"] in ("ready", "exporting", "resizing", *FAILOVER_STATES)
        out: dict[str, Any] = {
            "state": "in-sync" if usable else "creating",
            "step": None if v["state"] == "ready" else v["state"],
            "size_bytes": v["size_bytes"],
            "hosts": sorted(v.get("hosts") or []) if v["state"] == "ready" else None,
        }
        wait = self.teardown_waits.get(v["uuid"])
        if wait is not None:
            out["step"] = wait[1]  # the delete's progress says which node waits for what
        down = self._dp_down()
        if down and usable:
            out.update(state="failed", step=None, hosts=None, error=down)  # step None: it comes back here
        if int(v.get("replicas") or 1) > 1:
            out["epoch"] = int(v.get("epoch") or 1)  # a new primary waits for its legs at its epoch
            if self.handed_off.get(v["uuid"]) == out["epoch"]:
                out["handed_off"] = out["epoch"]
            if self.freezer.frozen_for(v["uuid"]):
                out["frozen"] = self.freezer.frozen_for(v["uuid"])
            if down:
                pass
            elif v.get("role") == "secondary" and usable:
                out["state"] = "syncing"
            elif v.get("role") == "primary" and v["state"] == "ready":
                from nodeos.dataplane.mirror_names import mirror_id_for

                try:
                    info = await self.node.ops.call("mirror_status", mirror_id_for(v["uuid"]))
                except NodeosError as err:
                    out.update(state="degraded", error=err.message)
                    return out
                if info is None:
                    out.update(state="failed", error="the mirror is not assembled")
                else:
                    if not remotes:  # read once a report, for every primary
                        try:
                            remotes.append(await self.node.ops.call("list_remotes"))
                        except NodeosError:
                            remotes.append(None)  # legs matched by slot
                    down = self.legwatch.down_of(v)
                    members, progress = self.node.ops.mirrors.mirror_members(info, v, remotes[0], down)
                    out["members"] = members
                    if progress:
                        out["progress"] = progress
                    if info.degraded:
                        out["state"] = "degraded"
        return out

    async def _report_body(self: Agent, d: Any) -> dict[str, Any]:
        node = self.node
        dp: dict[str, Any] = {"name": "none", "listeners": []}
        pools: dict[str, Any] = {}
        replicas: dict[str, Any] = {}
        snapshots: dict[str, Any] = {}
        drives = self._drives
        if node.has_dataplane:
            dp = {
                "name": node.dp.name,
                "qos": bool(node.describe.get("qos")),
                # Snapshots of replicated volumes need it (nodeos/storage/snapshot_map.py).
                "mirror_write_freeze": node.dp.mirror_caps.write_freeze,
                # Growing replicated volumes needs it on every replica node (nodeos/control/decide.py).
                "mirror_grow": node.dp.mirror_caps.grow,
                "listeners": node.listeners_json(),
                "error": None,
                "orphans": self.gc.report(),
                # Calls past their deadline (nodeos/daemon/lanes.py): the node reports on without them.
                "stuck": node.stuck_calls() if hasattr(node, "stuck_calls") else [],
            }
            precs, vrecs, srecs = node.records()
            down = self._dp_down()
            # Pool capacity costs an LVM/SPDK round trip: read after a change, else every CAP_EVERY_S.
            if down:
                self._cap_error = down
            elif self._cap_dirty or time.monotonic() - self._cap_at >= CAP_EVERY_S:
                try:
                    self._cap = {i.pool_id: i for i in await node.ops.call("list_pools")}
                    self._cap_error = None
                except NodeosError as err:
                    self._cap_error = err.message
                self._cap_at, self._cap_dirty = time.monotonic(), False
            cap = self._cap
            dp["error"] = self._cap_error
            for name, p in precs.items():
                info = cap.get(p["pool_id"])
                state = "ready" if p["state"] == "ready" else "creating"
                pools[p["pool_id"]] = {
                    "name": name,
                    "state": state,
                    "size_bytes": info.size_bytes if info else p.get("size_bytes", 0),
                    "free_bytes": info.free_bytes if info else 0,
                }
            remotes: list[Any] = []  # the attached legs, [] until a primary's report reads them
            for v in vrecs.values():
                if v["state"] == "deleting":
                    continue
                replicas[v["uuid"]] = await self._replica_report(v, remotes)
            for s in srecs.values():
                if s["state"] != "deleting" and s.get("uuid"):
                    snapshots[s["uuid"]] = {"state": onestep.reported_state(d.map.state, s)}
            for key, err in self.errors.items():
                kind = key.split(":", 1)[0]
                if kind == "pool":
                    pools[err["uuid"]] = {"state": "failed", "error": f"{err['step']}: {err['error']}"}
                elif kind == "volume" and err["step"] in ("volume.create", "volume.clone"):
                    replicas[err["uuid"]] = {"state": "failed", "step": err["step"], "error": err["error"]}
                elif kind == "snapshot":
                    snapshots[err["uuid"]] = {"state": "failed", "error": err["error"]}
            if time.monotonic() - self._drives_at >= DRIVES_EVERY_S:
                with contextlib.suppress(Exception):
                    self._drives = await node.drive_inventory()
                    self._drives_at = time.monotonic()
            drives = await self._missing_drives(precs, pools, self._drives)
        return {
            "dataplane": dp,
            "drives": drives,
            "pools": pools,
            "replicas": replicas,
            "snapshots": snapshots,
            "published": self.published.report() if node.has_dataplane else {},
            "storage_addresses": list(node.ctx.storage_addresses),
        }

    async def _missing_drives(
        self, precs: dict[str, Any], pools: dict[str, Any], drives: dict[str, Any]
    ) -> dict[str, Any]:
        """A drive of a ready pool gone from the machine (pulled, dead on the bus): its pool is
        reported failed and the drive "missing", so the leader moves the pool's replicas away at
        once (nodeos/storage/replace.py). A cheap sysfs scan, every pass (at most IDLE_PASS_S
        apart). Kernel data plane only: SPDK holds its drives outside the kernel's NVMe driver."""
        if self.node.dp.name != "kernel":
            return drives
        own = {p["pool_id"]: list(p.get("drives") or ()) for p in precs.values() if p["state"] == "ready"}
        try:
            present = await asyncio.to_thread(inventory.present_drive_ids)
        except OSError as err:
            LOG.warning("cannot look for missing drives: %s", err)
            return drives
        missing = inventory.missing_pool_drives(own, present)
        for pool_id, gone in missing.items():
            error = f"drive {', '.join(gone)} is missing (removed or dead)"
            pools[pool_id] = {**pools.get(pool_id, {}), "state": "failed", "error": error}
        if missing.keys() != self._missing_logged:
            for pool_id in sorted(missing.keys() - self._missing_logged):
                LOG.error("pool %s: %s", pool_id, pools[pool_id]["error"])
            self._missing_logged = set(missing)
        return inventory.mark_missing(drives, missing)
