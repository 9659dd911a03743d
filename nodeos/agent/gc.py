"""The agent's garbage collector: scans for orphans, keeps the grace count, removes (shell).

The rule is nodeos/agent/orphans.py (pure). Called from the agent's pass under the node lock,
at most every SCAN_EVERY_S: it lists what the data plane holds (LVs, exports, md arrays,
remotes), asks the rule, and removes each orphan that is due through the durable operation
`orphan.remove` (nodeos/node/orphan_ops.py), logged and recorded as the cluster event
`replica_orphan_removed`. Orphans still in their grace period, and why others are kept, go in
the node's report (`dataplane.orphans`, shown by `nodeos node show`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from nodeos.agent import orphans
from nodeos.errors import NodeosError
from nodeos.observe import events as ev

LOG = logging.getLogger("nodeosd.agent")
SCAN_EVERY_S = 20.0
EVENT_TIMEOUT_S = 5.0


class OrphanCollector:
    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.tracker = orphans.Tracker()
        self.held: str | None = "not scanned yet"  # why nothing may be removed now
        self.pending: list[dict[str, Any]] = []  # orphans in their grace period (for the report)
        self.removed = 0
        self._scan_at = -SCAN_EVERY_S
        self._since: dict[str, int] = {}  # wall-clock second each pending orphan was first seen

    def recorded(self) -> frozenset[str]:
        """The uuids of every local record besides pools, volumes and snapshots (a later feature's
        own records, e.g. published volumes): never an orphan's."""
        store = self.agent.node.store
        skip = ("meta", "hosts", "intents", "pools", "volumes", "snapshots")
        out: set[str] = set()
        with store.read() as txn:
            for db in store.names():
                if db not in skip:
                    out.update(
                        str(r["uuid"]) for _, r in txn.items(db) if isinstance(r, dict) and r.get("uuid")
                    )
        return frozenset(out)

    def standing(self, st: dict[str, Any]) -> orphans.Standing:
        node = self.agent.node
        ctl = (getattr(getattr(node, "ctx", None), "services", None) or {}).get("control")
        lease = getattr(ctl, "lease", None)
        with node.store.read() as txn:
            intents = sum(1 for _ in txn.items("intents"))
        if lease is None:
            return orphans.Standing(False, "down", 0, int(st["applied_index"]), intents)
        return orphans.Standing(
            lease.valid(time.monotonic()),
            str(lease.grant[0]),
            int(lease.grant[1]),
            int(st["applied_index"]),
            intents,
        )

    def report(self) -> dict[str, Any]:
        return {"held": self.held, "pending": self.pending, "removed": self.removed}

    async def run(self, st: dict[str, Any], me: int, recs: tuple[dict[str, Any], ...]) -> bool:
        """One scan when due; True when the report's orphan part changed."""
        now = time.monotonic()
        if now - self._scan_at < SCAN_EVERY_S:
            return False
        self._scan_at = now
        before = self.report()
        held = orphans.gate(st, me, self.standing(st))
        try:
            found = await self._found()
        except NodeosError as err:
            LOG.warning("orphan scan failed: %s", err.message)
            held = f"scan failed: {err.message}"
            found = None
        if held != self.held:
            LOG.info("orphan collection %s", f"held: {held}" if held else "resumes")
        self.held = held
        found_orphans = orphans.find(st, me, recs, found, self.recorded())[0] if found is not None else []
        index = int(st["applied_index"])
        if held is not None:
            # Listed (kept) but not counted: a stale view or a node in doubt starts the grace anew.
            self.tracker.closed()
            self._since = {}
            self.pending = [u.view() for u in found_orphans]
            return self.report() != before
        due = self.tracker.advance(found_orphans, now, index)
        for u in found_orphans:
            if self.tracker.seen[u.key].scans == 1:
                self._since[u.key] = round(time.time())
                LOG.warning("orphan found (grace %.0f s): %s", orphans.GRACE_S, u.view())
        for u in due:
            # The map may have moved during the scan (it applies while we wait on the data plane).
            why = orphans.kept_because(st, me, self.agent.node.records(), u, self.recorded())
            if why is None and orphans.gate(st, me, self.standing(st)) is None:
                await self._remove(u, me, index)
            else:
                self.tracker.seen.pop(u.key, None)
        self._since = {k: v for k, v in self._since.items() if k in self.tracker.seen}
        self.pending = [
            dict(u.view(), since=self._since[u.key]) for u in found_orphans if u.key in self._since
        ]
        return self.report() != before

    async def _found(self) -> orphans.Found:
        call = self.agent.node.ops.call
        lvs = tuple((v.pool_id, v.vol_id, v.kind) for v in await call("list_volumes", None))
        exports = tuple(e.nqn for e in await call("list_exports"))
        mirrors = tuple(m.mirror_id for m in await call("list_mirrors"))
        remotes = tuple(r.nqn for r in await call("list_remotes"))
        return orphans.Found(lvs, exports, mirrors, remotes)

    async def _remove(self, u: orphans.Orphan, me: int, index: int) -> None:
        node = self.agent.node
        short = u.key.split(":", 1)[1] if u.kind == "volume" else None
        data = {
            "name": u.key,
            "kind": u.kind,
            "uuid": u.uuid,
            "short": short,
            "lvs": [list(x) for x in u.lvs],
            "exports": list(u.exports),
            "mirror": u.mirror,
            "remotes": list(u.remotes),
            "views": bool(getattr(node.dp.mirror_caps, "views", False)),
            "index": index,
        }
        seen = self.tracker.seen.get(u.key)
        try:
            await node.ops.run("orphan.remove", data, lambda txn: None)
        except NodeosError as err:
            LOG.error("orphan %s not removed: %s", u.key, err.message)
            self.tracker.seen.pop(u.key, None)  # counted again from the start
            return
        self.tracker.seen.pop(u.key, None)
        self.removed += 1
        what = ", ".join([*(f"LV {p}/{v}" for p, v in u.lvs), *u.exports, *filter(None, [u.mirror])])
        what = ", ".join(filter(None, [what, *u.remotes]))
        age = f"{time.monotonic() - seen.since:.0f} s" if seen else "?"
        msg = f"node {me}: removed the orphaned leftovers of {u.kind} {u.uuid or short}: {what}"
        LOG.warning("%s (orphaned for %s, map index %d)", msg, age, index)
        ctx = {"volume": u.uuid} if u.kind == "volume" else {"snapshot": u.uuid}
        try:
            why = f"orphaned for {age} at map index {index}"
            e = ev.make_event("replica_orphan_removed", msg[: ev.MAX_MESSAGE], node=me, reason=why, **ctx)
            await self.agent.cluster.at_leader("command", {"cmd": "record_event", "args": e}, EVENT_TIMEOUT_S)
        except NodeosError as err:
            LOG.warning("event replica_orphan_removed not in the cluster log: %s", err.message)
