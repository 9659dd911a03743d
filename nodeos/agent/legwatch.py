"""Hold a primary's writes from the moment its mirror loses a leg until the map knows.

md degrades silently: once a leg fails, writes are acknowledged by the remaining legs alone,
while the map's `in_sync` still lists the lost replica as holding every acknowledged write.
Were this primary to die before its next report, the leader could promote that stale replica
(`../shared/replication/pitfalls.md` 5, 7). So a fast watch (every WATCH_S, sysfs reads off
the data plane queue) freezes the mirror's writes (md's suspend range) as soon as a leg that
the map still counts in sync shows failed or missing, wakes the agent to report at once, and
thaws once the map, at this volume's epoch, no longer counts that replica in sync (or the leg
is back in sync). Writes acknowledged between md failing the leg and the freeze (at most
WATCH_S plus a sysfs read) remain the one window md leaves open; docs/cluster.md says so.

A hold is bounded by HOLD_MAX_S: a map that cannot be reached for that long means this node
is about to lose its lease and fence itself anyway; thawing then is logged as critical.
`pending` is pure; `LegWatch` is the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from nodeos.cluster.failover_map import in_sync_of
from nodeos.dataplane.mirror_names import mirror_id_for
from nodeos.node.mirror_ops import leg_states

LOG = logging.getLogger("nodeosd.agent")
WATCH_S = 0.2
HOLD_MAX_S = 30.0


def pending(vol: dict[str, Any] | None, rec: dict[str, Any], me: int, legs: dict[int, str]) -> list[int]:
    """Nodes whose leg this primary lost while the map still counts them in sync (pure)."""
    if vol is None or vol["primary"] != me or vol["epoch"] != rec.get("epoch"):
        return []
    cur = set(in_sync_of(vol))
    return sorted(n for n, state in legs.items() if state == "failed" and n in cur and n != me)


class LegWatch:
    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.held: dict[str, float] = {}  # volume uuid -> since when this watch holds its writes
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                LOG.exception("leg watch failed")
            await asyncio.sleep(WATCH_S)

    async def tick(self) -> None:
        agent = self.agent
        node, d = agent.node, agent._driver()
        if d is None or not node.has_dataplane or d.id not in d.map.nodes:
            return
        st, me, dp = d.map.state, d.id, node.dp
        vrecs = node.records()[1]
        prims = [
            v
            for v in vrecs.values()
            if v.get("role") == "primary" and v["state"] == "ready" and int(v.get("replicas") or 1) > 1
        ]
        remotes = None
        for v in prims:
            uuid = v["uuid"]
            info = await asyncio.to_thread(dp.mirror_status, mirror_id_for(uuid))
            if info is None:
                continue
            if remotes is None:
                remotes = await asyncio.to_thread(dp.list_remotes)
            legs, _ = leg_states(info, v, remotes)
            lost = pending(st["volumes"].get(uuid), v, me, legs)
            if lost and uuid not in self.held:
                await asyncio.to_thread(dp.freeze_mirror_writes, mirror_id_for(uuid))
                self.held[uuid] = time.monotonic()
                LOG.error(
                    "volume %s epoch %s: leg(s) of node(s) %s lost; writes held until the map knows",
                    v["name"],
                    v.get("epoch"),
                    lost,
                )
                agent.wake.set()
            elif uuid in self.held and (not lost or time.monotonic() - self.held[uuid] > HOLD_MAX_S):
                since = self.held.pop(uuid)
                if not agent.freezer.frozen_for(uuid):  # a snapshot's freeze is the freezer's own
                    await asyncio.to_thread(dp.thaw_mirror_writes, mirror_id_for(uuid))
                took = time.monotonic() - since
                if lost:
                    LOG.critical(
                        "volume %s: the map did not learn of the lost leg(s) %s in %.0f s; writes resume",
                        v["name"],
                        lost,
                        took,
                    )
                else:
                    LOG.warning("volume %s: the map knows; writes resume after %.2f s", v["name"], took)
        for uuid in [u for u in self.held if u not in {v["uuid"] for v in prims}]:
            self.held.pop(uuid)  # no longer primary here (demoted, deleted): nothing to thaw
