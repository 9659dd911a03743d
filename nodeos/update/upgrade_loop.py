"""The leader's side of the rolling upgrade: the shell around nodeos/update/rolling.py.

While this node leads and the map holds a running upgrade, every TICK_S: ask the nodes of the
current domain what they run (`update.status`, only in the rejoin step), let `rolling.decide`
name the next act, and do it: propose the step, hand a node the update (`update.install`),
move leadership off this node before its own update, stop the upgrade with the reason, or
finish it and raise the cluster's feature level when every member knows a higher one. Nothing
is kept here that the next leader would need: the map holds the procedure.

Every call into a node is bounded (PEER_TIMEOUT_S) and a node that does not answer is only
"not back yet"; a hand-over or a rejoin that waits past its bound (STEP_BOUNDS_S) stops the
upgrade naming what it waited for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from nodeos.cluster import features
from nodeos.cluster.map import encode_command
from nodeos.cluster.raft import StateRole
from nodeos.errors import NodeosError
from nodeos.update import rolling

LOG = logging.getLogger("nodeosd.upgrade")
TICK_S = 1.0
PEER_TIMEOUT_S = 10.0
PROPOSE_TIMEOUT_S = 10.0
# How long a step may wait before the upgrade stops naming why: a primary that cannot move (no
# in-sync replica on another domain), a primary that does not cut a released leg (its agent
# wedged: the node is not taken down under it) and a node that does not come back. A resync has no bound:
# it takes as long as the data it copies (its progress is in `volume show`).
STEP_BOUNDS_S = {"handover": 600.0, "release": 300.0, "rejoin": 1800.0}


class UpgradeLoop:
    def __init__(self, cluster: Any, local_status: Any) -> None:
        self.cluster = cluster
        self.local_status = local_status  # () -> this node's update.status answer
        self.last_wait = ""  # why the upgrade waits (status, logs once per change)
        self.waiting_since: tuple[tuple[str, int, str], float] | None = None  # ((id, at, step), since)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            d = getattr(self.cluster, "driver", None)
            if d is None or d.role is not StateRole.LEADER:
                continue
            up = d.map.state.get("upgrade") or {}
            if up.get("state") != "running":
                continue
            try:
                await self.tick(d, up)
            except NodeosError as err:
                LOG.warning("upgrade %s: %s (tried again in %.0f s)", up.get("id"), err.message, TICK_S)
            except Exception:
                LOG.exception("upgrade %s: step failed", up.get("id"))

    async def _seen(self, d: Any, up: dict[str, Any]) -> dict[int, dict[str, Any]]:
        if up["step"] != "rejoin" or up["at"] >= len(up["domains"]):
            return {}
        out: dict[int, dict[str, Any]] = {}
        for nid in up["domains"][up["at"]]["nodes"]:
            try:
                if nid == d.id:
                    out[nid] = self.local_status()
                else:
                    out[nid] = await self.cluster.transport.request(nid, "update.status", {}, PEER_TIMEOUT_S)
            except NodeosError:
                continue  # not back yet
        return out

    async def _propose(self, d: Any, cmd: str, args: dict[str, Any], v: int = 1) -> Any:
        return await d.propose(encode_command(cmd, args, v), PROPOSE_TIMEOUT_S)

    async def tick(self, d: Any, up: dict[str, Any]) -> None:
        seen = await self._seen(d, up)
        act = rolling.decide(d.map.state, d.id, seen)
        if act.kind == "wait" and up["step"] in STEP_BOUNDS_S:
            act = self._bounded(up, act)
        if act.kind != "wait":
            self.last_wait = ""
        if act.kind == "wait":
            if act.reason != self.last_wait:
                LOG.info("upgrade %s: %s", up["id"], act.reason)
                self.last_wait = act.reason
        elif act.kind == "step":
            assert act.args is not None
            await self._propose(d, "upgrade_step", dict(act.args), act.v)
        elif act.kind == "send":
            await self._send(d, up, int(act.node or 0))
        elif act.kind == "transfer":
            self._transfer(d, up)
        elif act.kind == "stop":
            LOG.error("upgrade %s stopped: %s", up["id"], act.reason)
            await self._propose(
                d, "upgrade_state", {"id": up["id"], "state": "stopped", "reason": act.reason}
            )
        elif act.kind == "finish":
            await self._propose(d, "upgrade_state", {"id": up["id"], "state": "done"})
            await self._raise_level(d)

    def _bounded(self, up: dict[str, Any], act: rolling.Act) -> rolling.Act:
        """A wait past its step's bound stops the upgrade. Counted from when this leader first saw
        the step: a new leader gives it the whole bound again."""
        key = (up["id"], up["at"], up["step"])
        now = time.monotonic()
        if self.waiting_since is None or self.waiting_since[0] != key:
            self.waiting_since = (key, now)
        bound = STEP_BOUNDS_S[up["step"]]
        if now - self.waiting_since[1] > bound:
            return rolling.Act("stop", reason=f"{act.reason} for {bound:.0f} s")
        return act

    async def _send(self, d: Any, up: dict[str, Any], nid: int) -> None:
        b = up["bundle"]
        params = {
            "id": up["id"],
            "version": up["version"],
            "sha256": b["sha256"],
            "size": b["size"],
            "source": b["source"],
            "allow_downgrade": up.get("allow_downgrade", False),
        }
        name = rolling.name_of(d.map.state, nid)
        try:
            out = await self.cluster.transport.request(nid, "update.install", params, PEER_TIMEOUT_S)
        except NodeosError as err:
            reason = f"node {name} did not take the update: {err.message}"
            await self._propose(d, "upgrade_state", {"id": up["id"], "state": "stopped", "reason": reason})
            return
        args = {"id": up["id"], "at": up["at"], "step": "update", "to_at": up["at"], "to_step": "update"}
        note = f"{name}: update handed over (it copies the bundle, writes its other slot, reboots)"
        sent = {**args, "sent": {nid: str(out.get("boot_id"))}, "note": note}
        await self._propose(d, "upgrade_step", sent, rolling.step_version(d.map.state))

    def _transfer(self, d: Any, up: dict[str, Any]) -> None:
        """This node leads and is next: leadership goes to a voter outside the domain first."""
        dom = set(up["domains"][up["at"]]["nodes"])
        progress = d.node.status().progress
        # A voter in contact (it answered within the last election timeout), the most caught up:
        # a transfer to a dead voter would never finish (found by the process test).
        live = [
            (pr.match, v)
            for v, pr in progress.items()
            if v in d.conf_state.voters and v not in dom and v != d.id and pr.recent_active
        ]
        to = max(live)[1] if live else None
        if to is None:
            LOG.warning(
                "upgrade %s: no voter outside %s to lead meanwhile", up["id"], up["domains"][up["at"]]["name"]
            )
            return
        LOG.info("upgrade %s: leadership to node %d before this node's update", up["id"], to)
        d.transfer_leadership(to)

    async def _raise_level(self, d: Any) -> None:
        members = set(d.conf_state.voters) | set(d.conf_state.learners)
        st = d.map.state
        level = min((features.member_level(st["nodes"].get(n)) for n in members), default=0)
        if level > features.cluster_level(st):
            await self._propose(d, features.RAISE_COMMAND, {"level": level})
