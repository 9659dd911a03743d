"""The primary's watch over its mirrors' legs: drop a blocked leg once the map knows; hold
writes when md failed a leg the map still counts in sync.

Blocked legs (nodeos/agent/legs.py): replica legs attach with no fast-fail and no controller
loss, so a replica the primary cannot reach blocks md's writes instead of being failed by md.
Every WATCH_S this watch reads the controllers' states (sysfs, off the data plane queue); a leg
whose controller has not been live for legs.LEG_DOWN_S is reported failed (the agent is woken
to report at once), and once the map, at this volume's epoch, no longer counts that replica in
sync (nor may a report of this node in flight make it count it again), the leg is dropped (md
fails it, its controllers are deleted): md completes the held writes on the other legs. A leg of
a node released for its update by a rolling upgrade is dropped the same way at once, its
controller live (nodeos/agent/legs.py `released_legs`): no write ever blocks on it. This
runs off the data plane queue on purpose: a queued step that waits for md's I/O (a snapshot's
freeze, a view's table swap) waits for exactly this.

md-failed legs: md still fails a leg on its own when the replica answers with an I/O error (its
drive failed). Then md acknowledges writes on the remaining legs at once, while the map's
`in_sync` still lists the lost replica (`../shared/replication/pitfalls.md` 5, 7). So a leg the
map counts (or may count) in sync that md shows failed or missing freezes the mirror's writes
(md's suspend range), wakes the agent to report, and thaws once the map no longer counts that
replica in sync (or the leg is back in sync). Writes acknowledged between md failing the leg
and the freeze (at most WATCH_S plus a sysfs read) remain the window md leaves open there;
docs/cluster.md says so. No freeze while any leg blocks: no write completes then anyway, and
the freeze itself would wait for the blocked writes.

A hold is bounded by HOLD_MAX_S: a map that cannot be reached for that long means this node
is about to lose its lease and fence itself anyway; thawing then is logged as critical.
The decisions are pure (nodeos/agent/legs.py); `LegWatch` is the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from nodeos.agent import legs
from nodeos.agent.legs import pending
from nodeos.daemon.periodic import Periodic
from nodeos.dataplane.mirror_names import mirror_id_for, replica_nqn
from nodeos.node.mirror_ops import leg_states
from nodeos.storage.failover_map import released_nodes

LOG = logging.getLogger("nodeosd.agent")
WATCH_S = 0.2
HOLD_MAX_S = 30.0
__all__ = ["LegWatch", "pending"]


class LegWatch(Periodic):
    every_s = WATCH_S
    what = "leg watch"
    slow_s = 1.0  # its data plane reads share the SPDK RPC socket with the agent's steps
    log = LOG

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.held: dict[str, float] = {}  # volume uuid -> since when this watch holds its writes
        self.since: dict[str, float] = {}  # replica nqn -> since when its controller is not live
        self.down: dict[str, set[int]] = {}  # volume uuid -> nodes whose leg is reported failed

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
        now = time.monotonic()
        remotes = await asyncio.to_thread(dp.list_remotes) if prims else []
        self.since = legs.not_live_since(self.since, remotes, now)
        attached = {r.nqn for r in remotes}
        held_rep, sent = st["reports"].get(me), list(agent.sent)
        for v in prims:
            uuid = v["uuid"]
            mid = mirror_id_for(uuid)
            info = await asyncio.to_thread(dp.mirror_status, mid)
            if info is None:
                continue
            vol = st["volumes"].get(uuid)
            down = legs.down_nodes(v, self.since, now)
            if down != self.down.get(uuid, set()):
                if down - self.down.get(uuid, set()):
                    LOG.error(
                        "volume %s epoch %s: leg(s) of node(s) %s not live for %.0f s: reported failed",
                        v["name"],
                        v.get("epoch"),
                        sorted(down - self.down.get(uuid, set())),
                        legs.LEG_DOWN_S,
                    )
                self.down[uuid] = down
                agent.wake.set()
            released = legs.released_legs(st, v, attached)
            for nid in legs.removable(vol, v, me, down, held_rep, sent, released):
                nqn = replica_nqn(uuid, str(nid))
                took = now - self.since.get(nqn, now)
                await asyncio.to_thread(dp.drop_mirror_leg, mid, nqn)
                if nid in released and nid not in down:
                    LOG.warning(
                        "volume %s epoch %s: leg of node %s cut, its node released for its update (md's "
                        "bitmap keeps what it misses: re-added when the release ends)",
                        v["name"],
                        v.get("epoch"),
                        nid,
                    )
                else:
                    LOG.error(
                        "volume %s epoch %s: leg of node %s dropped after %.1f s not live (the map no "
                        "longer counts it in sync): held writes complete on the other legs",
                        v["name"],
                        v.get("epoch"),
                        nid,
                        took,
                    )
                self.since.pop(nqn, None)
                agent.wake.set()
            states, _ = leg_states(info, v, remotes)
            lost = pending(vol, v, me, states, held_rep, sent, released_nodes(st))
            blocked = any(r.state != "live" and r.nqn in self._nqns(v) for r in remotes)
            if lost and uuid not in self.held and not blocked:
                await asyncio.to_thread(dp.freeze_mirror_writes, mid)
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
                    await asyncio.to_thread(dp.thaw_mirror_writes, mid)
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
        for uuid in [u for u in self.down if u not in {v["uuid"] for v in prims}]:
            self.down.pop(uuid)

    def down_of(self, rec: dict[str, Any]) -> set[int]:
        """Nodes whose leg of primary record `rec` is to be reported failed (controller not live)."""
        return legs.down_nodes(rec, self.since, time.monotonic())

    @staticmethod
    def _nqns(rec: dict[str, Any]) -> set[str]:
        return {replica_nqn(rec["uuid"], str(r["node"])) for r in rec.get("remotes") or []}
