"""The node agent: makes this node's data plane match the cluster map, reports what it has.

Runs inside nodeosd on every node. A pass: read the local copy of the map, plan
(nodeos/agent/plan.py, pure), run each step as a durable operation (nodeos/node/ops.py:
intent first, so `kill -9` at any step is finished or rolled back at the next start), then
report the node's actual state to the map in one `node_report` command, only when it
changed: at most every REPORT_MIN_INTERVAL_S, or URGENT_MIN_INTERVAL_S when an operation waits
for the change (nodeos/agent/urgency.py). Passes run as soon as the map changes beyond its
key-value store (MIN_PASS_GAP_S apart while the node has work, POLL_S apart otherwise), after a
failure (with a pause) and every IDLE_PASS_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from nodeos.agent import freeze, handoff, onestep, orphans, referral_plan, urgency
from nodeos.agent.gc import OrphanCollector
from nodeos.agent.legs import Sent
from nodeos.agent.legwatch import LegWatch
from nodeos.agent.plan import Step, plan, waits_for_primary
from nodeos.agent.published import Published
from nodeos.agent.report import (
    BUSY_S,
    CAP_EVERY_S,
    DRIVES_EVERY_S,
    RETRY_PAUSE_S,
    Reporting,
)
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import NodeosError
from nodeos.node import crash, opspec

LOG = logging.getLogger("nodeosd.agent")
POLL_S = 0.1
IDLE_PASS_S = 10.0
# An idle agent looks again at least this often without being woken (a key-value-only commit, the
# next idle pass): every POLL_S cost an idle node a third of an emulated core in the lab
# (2026-12-03: 69 wake-ups a second on an idle storage VM, nodeosd at 35 % of its CPU).
IDLE_WAKE_S = 1.0
MIN_PASS_GAP_S = 0.001  # between the end of a pass and the start of the next, while busy
SLOW_PASS_S = 2.0  # a pass this long is logged
# How long a replica of a deleted volume waits for its primary's teardown (plan.waits_for_primary)
# before it goes anyway: the primary's own teardown takes seconds (its legs cut in one round).
TEARDOWN_WAIT_S = 30.0
MAX_CREATES_TOGETHER = 64  # volume creates of one pass sent together (SpdkRpc.call_many's window)
# Thin creates and snapshots take no space when made: the pools' capacity is not read again for
# them (an RPC per report; a snapshot's is in the window its volume's writes are held).
CAPACITY_KEPT = opspec.named("keeps_capacity")
DISCOVERY_SVCID = "8009"
# Steps whose failure is retried at the next pass (the others wait for the map to change).
RETRIED_STEPS = opspec.named("retried")


class Agent(Reporting):
    def __init__(self, node: Any, cluster: Any) -> None:
        self.node = node  # the NodeService: store, ops, lock, data plane, listeners
        self.cluster = cluster
        self.errors: dict[str, dict[str, Any]] = {}  # "volume:NAME" -> {step, error, uuid}
        self._task: asyncio.Task[None] | None = None
        self._last_report: dict[str, Any] | None = None
        self._last_seq = 0
        self._last_target: tuple[int, int, Any] | None = None
        self._last_report_at = 0.0
        self._drives: dict[str, Any] = {}
        self._drives_at = -DRIVES_EVERY_S
        self._missing_logged: set[str] = set()  # pools whose missing drive was logged
        self.wake = asyncio.Event()
        self._busy_until = 0.0  # see BUSY_S
        self._referrals_set: tuple[Any, Any] | None = None
        self._cap: dict[str, Any] = {}
        self._cap_error: str | None = None
        self._cap_at = -CAP_EVERY_S
        self._cap_dirty = True
        self.passes = 0
        self.freezer = freeze.Freezer()
        self.onestep = onestep.OneStep(self)  # snapshots of replicated volumes in one hold (issue 29)
        self.handed_off: dict[str, int] = {}  # uuid -> epoch this node stopped serving at
        self.legwatch = LegWatch(self)
        self.sent: list[Sent] = []  # reports sent that the map may not hold yet (nodeos/agent/legs.py)
        self._rebuild_applied: tuple[Any, ...] | None = None
        self.gc = OrphanCollector(self)  # leftovers no record nor map entry owns (nodeos/agent/orphans.py)
        self.published = Published(self)  # published volumes (issue 13)
        # Replicas of deleted volumes waiting for their primary's teardown: uuid -> (since, why).
        self.teardown_waits: dict[str, tuple[float, str]] = {}
        self._roles: frozenset[tuple[Any, ...]] = frozenset()  # urgency.roles at the last look

    def start(self) -> None:
        # A snapshot rolled back by recovery lost its moment: report it failed (the map drops
        # it) rather than take it again later.
        for rec in self.node.recovery:
            if rec.get("op") == "volume.snapshot" and rec.get("action") == "backward" and rec.get("uuid"):
                self.errors[f"snapshot:{rec['name']}"] = {
                    "step": "volume.snapshot",
                    "error": "interrupted by a restart of nodeosd; the snapshot's moment is lost",
                    "uuid": rec["uuid"],
                }
        self._task = asyncio.create_task(self._run())
        self.legwatch.start()
        self.onestep.start()

    async def stop(self) -> None:
        self.onestep.stop()
        self.published.stop()
        await self.legwatch.stop()
        await cancel_and_wait(self._task)

    def _dp_down(self) -> str | None:
        fn = getattr(self.node, "dataplane_down", None)
        return fn() if callable(fn) else None

    def dataplane_reset(self) -> None:
        """The data plane came back empty: set referrals and the rebuild cap again, re-read capacity."""
        self._referrals_set = None
        self._rebuild_applied = None
        self._cap_dirty = True
        self.published.reset()
        self.wake.set()

    def _driver(self) -> Any:
        return getattr(self.cluster, "driver", None)

    async def _run(self) -> None:
        seen = -1
        next_pass = 0.0
        last_end = -MIN_PASS_GAP_S
        while True:
            d = self._driver()
            now = time.monotonic()
            due = (
                d is not None
                and d.id in d.map.nodes
                and (d.map.applied_index != seen or now >= next_pass or self.wake.is_set())
            )
            if not due:
                await self._idle(d, min(IDLE_WAKE_S, max(POLL_S, next_pass - now)))
                continue
            # Quick passes while this node has work (steps, state-change reports: BUSY_S); else at
            # most one per POLL_S, as a map busy with other nodes' reports would otherwise keep
            # every agent passing.
            gap = MIN_PASS_GAP_S if now < self._busy_until else POLL_S
            if d.map.applied_index != seen and (moved := urgency.roles(d.map.state, d.id)) != self._roles:
                self._roles, gap = moved, MIN_PASS_GAP_S  # a primary moves: follow it at once
            if now < last_end + gap and not self.wake.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(last_end + gap - now):
                        await self.wake.wait()
            self.wake.clear()
            seen = d.map.applied_index
            started = time.monotonic()
            calls_before = dict(self.node.ops.call_times)
            try:
                retry = await self.run_pass()
            except Exception:
                LOG.exception("agent pass failed")
                retry = True
            last_end = time.monotonic()
            if last_end - started > SLOW_PASS_S:  # e.g. a data plane call or a report that hung
                LOG.info(
                    "agent pass took %.1f s (map at index %d); data plane calls meanwhile: %s",
                    last_end - started,
                    seen,
                    _calls_since(calls_before, self.node.ops.call_times),
                )
            next_pass = last_end + (RETRY_PAUSE_S if retry else IDLE_PASS_S)
            if self.freezer.held:
                next_pass = min(next_pass, time.monotonic() + freeze.FREEZE_POLL_S)

    async def _idle(self, d: Any, timeout: float) -> None:
        """Until woken, the map changed (beyond its key-value store), or `timeout` passed."""
        waits = [asyncio.ensure_future(self.wake.wait())]
        if d is not None:
            waits.append(asyncio.ensure_future(d.map_changed.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def run_pass(self) -> bool:
        """One reconcile pass and report; True when something should be retried soon."""
        d = self._driver()
        me = d.id
        retry = False
        aborts: list[tuple[str, str]] = []
        # A dead data plane is reconciled by its re-export when it returns (nodeos/node/dpwatch.py).
        if self.node.has_dataplane and not self._dp_down():
            await self.node.import_legacy_once(self.cluster)
            async with self.node.lock:
                st = d.map.state
                recs = self.node.records()
                self._forget_errors(st, me)
                retry |= await self._referrals(st, me)
                # Freezes first: a thaw must never wait behind a step (a delete stops the mirror).
                aborts = await self._freezes(st, me, recs[1])
                handed = dict(self.handed_off)
                await handoff.follow(self.node, st, me, recs[1], self.handed_off)
                if self.handed_off != handed:  # the new primary waits for it (issue 29: the I/O gap)
                    await self._report(d)
                retry |= await self._rebuild_limit(st, me)
                recs = self.node.records()
                overdue = self._teardown_overdue(st, me, recs[1])
                steps = plan(st, me, *recs, skip=set(self.errors), overdue=overdue)
                if orphans.scans_beside([s.op for s in steps]):  # its trouble never stops a pass
                    try:
                        await self.gc.run(st, me, recs)
                    except Exception:
                        LOG.exception("orphan collection failed")
                for group in batches(steps):
                    failed = await self._run_steps(group)
                    for step, err in failed:
                        key = _key(step)
                        uuid = (step.record or {}).get("uuid") or (step.record or {}).get("pool_id")
                        self.errors[key] = {"step": step.op, "error": err.message, "uuid": uuid}
                        LOG.error("%s %s failed: %s", step.op, step.name, err.message)
                    retry |= bool(failed)
                retry |= await self.published.reconcile(st, me)
        for snap, reason in aborts:
            await self._abort_snapshot(snap, reason)
        self.passes += 1
        return not await self._report(d) or retry

    def _teardown_overdue(self, st: dict[str, Any], me: int, vrecs: dict[str, Any]) -> set[str]:
        """Track which replicas wait for their primary's teardown; those past TEARDOWN_WAIT_S."""
        now = time.monotonic()
        waits = {}
        for v in vrecs.values():
            why = waits_for_primary(st, v, me)
            if why is not None:
                waits[v["uuid"]] = (self.teardown_waits.get(v["uuid"], (now, why))[0], why)
        overdue = {u for u, (since, _) in waits.items() if now - since > TEARDOWN_WAIT_S}
        was = {u for u, (since, _) in self.teardown_waits.items() if now - since > TEARDOWN_WAIT_S}
        for u in sorted(overdue - was):
            LOG.warning(
                "volume %s: %s for %.0f s; removing this replica anyway", u, waits[u][1], TEARDOWN_WAIT_S
            )
        self.teardown_waits = waits
        return overdue

    async def _freezes(self, st: dict[str, Any], me: int, vrecs: dict[str, Any]) -> list[tuple[str, str]]:
        """Make the write freezes of this node's mirrors match the map; the snapshots to abort."""
        from nodeos.dataplane.mirror_names import mirror_id_for

        fz = self.freezer
        fz.forget_expired(st)
        if not fz.kernel_checked:
            # A previous nodeosd may have died with writes frozen (kernel state outlives it).
            for v in vrecs.values():
                if v.get("role") == "primary" and v["state"] == "ready":
                    try:
                        if await self.node.ops.call("mirror_writes_frozen", mirror_id_for(v["uuid"])):
                            fz.found_frozen.add(v["uuid"])
                    except NodeosError as err:
                        LOG.warning("freeze state of %s unknown: %s", v["name"], err.message)
            fz.kernel_checked = True
        aborts: list[tuple[str, str]] = []
        now = time.monotonic()
        for act in freeze.decide(freeze.wanted(st, me, vrecs), fz.held, fz.found_frozen, fz.expired, now):
            mid = mirror_id_for(act.vol_uuid)
            if act.kind == "abort":
                h = fz.held.get(act.vol_uuid)
                why = (
                    f"not settled by the map {freeze.TAKEN_ABORT_S:.0f} s after its one step"
                    if h is not None and h.thawed
                    else f"the writes were held for {freeze.FREEZE_ABORT_S:.0f} s"
                )
                aborts.append((str(act.snap), why))
                continue
            try:
                if act.kind == "freeze":
                    if onestep.enabled(st) and await self._one_step(st, me, act, mid, now, aborts):
                        continue
                    await self.node.ops.call("freeze_mirror_writes", mid)
                    fz.froze(act.vol_uuid, str(act.snap), now)
                    crash.point("snapshot.freeze:frozen")
                    LOG.info("writes of mirror %s frozen for snapshot %s", mid, act.snap)
                    continue
                held = fz.held.get(act.vol_uuid)
                if held is not None and held.thawed:  # a one-step snapshot let them go itself
                    fz.thawed(act.vol_uuid)
                    continue
                await self.node.ops.call("thaw_mirror_writes", mid)
                fz.thawed(act.vol_uuid)
                # in ms: the phases of passes hold writes ~0.1 s on SPDK (docs/benchmarks.md)
                since = (
                    f" after {time.monotonic() - held.since:.3f} s" if held else " (frozen before this start)"
                )
                LOG.info("writes of mirror %s thawed%s", mid, since)
            except NodeosError as err:
                LOG.error("%s of mirror %s failed: %s", act.kind, mid, err.message)
                if act.kind == "freeze":
                    aborts.append((str(act.snap), f"the writes could not be frozen: {err.message}"))
                    # checked again next pass: a freeze that timed out may still take hold
                    fz.found_frozen.add(act.vol_uuid)
                continue
            if act.kind == "expire":
                fz.expired.add(str(act.snap))
                snap = st["snapshots"].get(str(act.snap))
                # Only a snapshot still being taken failed: one the map holds ready was taken
                # while the writes were held, before the freeze ran out.
                if snap is not None and snap["state"] == "creating":
                    # Not taken here after the thaw; reported failed, so the map drops it.
                    self.errors[f"snapshot:{snap['name']}"] = {
                        "step": "volume.snapshot",
                        "error": f"the freeze expired after {freeze.FREEZE_HARD_S:.0f} s (writes resumed)",
                        "uuid": snap["uuid"],
                    }
        return aborts

    async def _one_step(
        self, st: dict[str, Any], me: int, act: freeze.Action, mid: str, now: float, aborts: list[Any]
    ) -> bool:
        """A snapshot of a volume this node is primary of, every leg in one hold of its writes
        (nodeos/agent/onestep.py). False: the phases of passes take it (nothing held yet)."""
        snap = str(act.snap)
        out = await self.onestep.take(st, me, act.vol_uuid, snap, mid)
        name = st["snapshots"][snap]["name"]
        if out.kind == "passes":
            LOG.info("snapshot %s: %s; taken in passes", name, out.reason)
            if not out.frozen:
                return False
            self.freezer.froze(act.vol_uuid, snap, now)
            crash.point("snapshot.freeze:frozen")
            return True
        parts = ", ".join(f"{k} {v * 1000:.1f}" for k, v in out.parts.items())
        if out.kind == "taken":
            if out.frozen:  # the thaw failed: held on, thawed once the map no longer wants it
                self.freezer.froze(act.vol_uuid, snap, now)
            else:  # writes flow again: the map gets TAKEN_ABORT_S for its phases from now on
                self.freezer.took(act.vol_uuid, snap, time.monotonic())
            by_time = sorted(out.legs_s.items(), key=lambda kv: kv[1])
            legs = ", ".join(f"{k} {v * 1000:.1f}" for k, v in by_time)
            LOG.info(
                "snapshot %s: every leg taken in one step, writes of mirror %s held %.1f ms (%s ms); "
                "legs answered after the freeze: %s ms; every leg recorded %.1f ms after the thaw",
                name, mid, out.held_s * 1000, parts, legs, out.settled_s * 1000,
            )  # fmt: skip
            return True
        # Failed: the writes go on (thawed at once); the map drops the snapshot, by the abort
        # at once or by this node's report of it failed.
        if out.frozen:
            self.freezer.froze(act.vol_uuid, snap, now)
        self.freezer.expired.add(snap)
        why = f"one-step snapshot failed: {out.reason}"
        LOG.error("snapshot %s: %s (writes held %.1f ms: %s ms)", name, why, out.held_s * 1000, parts)
        self.errors[f"snapshot:{name}"] = {"step": "volume.snapshot", "error": why, "uuid": snap}
        aborts.append((snap, why))
        return True

    async def _rebuild_limit(self, st: dict[str, Any], me: int) -> bool:
        """Apply the node's rebuild cap from the map when it changed (changeable at run time)."""
        mbps = (st["nodes"].get(me) or {}).get("rebuild_mbps")
        if self._rebuild_applied == (mbps,) or not hasattr(self.node.dp, "set_rebuild_limit"):
            return False
        try:
            await self.node.ops.call("set_rebuild_limit", None if mbps is None else int(mbps) * 1000)
        except NodeosError as err:
            LOG.warning("rebuild limit %s MB/s not applied: %s", mbps, err.message)
            return True
        LOG.info("rebuild limit: %s", f"{mbps} MB/s" if mbps is not None else "data plane default")
        self._rebuild_applied = (mbps,)
        return False

    async def _abort_snapshot(self, snap: str, reason: str) -> None:
        """Ask the leader to drop a snapshot whose freeze lasts too long (retried each pass)."""
        args = {"uuid": snap, "reason": reason}
        try:
            await self.cluster.at_leader("command", {"cmd": "snapshot_abort", "args": args}, 3.0)
            LOG.warning("snapshot %s aborted: %s", snap, reason)
        except NodeosError as err:
            LOG.warning("abort of snapshot %s not committed (%s); writes stay frozen", snap, err.message)

    async def _referrals(self, st: dict[str, Any], me: int) -> bool:
        """Point this node's discovery ports at every other storage node's of the same transport
        (TCP and RDMA alike), so `nvme connect-all -t tcp|rdma` against any node finds every
        path (each node's log lists only what the host may use)."""
        node = self.node
        if not hasattr(node.dp, "set_referrals"):
            return False
        mine = referral_plan.mine(node.listeners_json())
        # Also while this node exports nothing: its discovery port keeps answering (the kernel
        # target anchors it, nvmet.ANCHOR_NQN) and refers hosts to the nodes that do.
        others = referral_plan.others(st, me)
        want = (mine, others)
        if want == self._referrals_set:
            return False
        plan = referral_plan.per_port(mine, others, DISCOVERY_SVCID)
        try:
            if self._referrals_set is None and not others:
                # First pass after a start with nothing to refer to: clear only what an earlier
                # run left (a daemon killed after its last volume went kept its referrals).
                plan = [(p, r) for p, r in plan if await node.ops.call("list_referrals", p)]
                if not plan:
                    self._referrals_set = want
                    return False
            for port, refs in plan:
                await node.ops.call("set_referrals", port, refs)
        except NodeosError as err:
            LOG.warning("discovery referrals not set: %s", err.message)
            return True
        self._referrals_set = want
        return False

    def refers_hosts(self) -> bool:
        """Whether this node's discovery ports are set to refer hosts to other nodes (so they
        listen, exporting or not: mDNS advertises them)."""
        return bool(self._referrals_set and self._referrals_set[0] and self._referrals_set[1])

    async def _run_steps(self, group: list[Step]) -> list[tuple[Step, NodeosError]]:
        """One step, or volume creates (one or more) made together (ops.run_creates); the failed
        ones. An error that is no NodeosError (a bug) is raised once the others are done."""
        self._cap_dirty |= any(s.op not in CAPACITY_KEPT for s in group)
        self._busy_until = time.monotonic() + BUSY_S
        items = [(dict(step.data), _prepare(step)) for step in group]
        if group[0].op != "volume.create":
            try:
                await self.node.ops.run(group[0].op, *items[0])
                return []
            except NodeosError as err:
                return [(group[0], err)]
        errors = await self.node.ops.run_creates(items)
        bug = next((e for e in errors if e is not None and not isinstance(e, NodeosError)), None)
        if bug is not None:
            raise bug
        return [(step, err) for step, err in zip(group, errors, strict=True) if isinstance(err, NodeosError)]

    def _forget_errors(self, st: dict[str, Any], me: int) -> None:
        for key, err in list(self.errors.items()):
            if not error_still_wanted(st, key, err, me):
                del self.errors[key]


def error_still_wanted(st: dict[str, Any], key: str, err: dict[str, Any], me: int | None = None) -> bool:
    """An error is kept (reported, its step not retried) while the map still wants the same
    object in the same way. A snapshot or volume the map deletes is no longer wanted as it was:
    its error kept would be reported as a failed snapshot or replica on this node, which the map's
    delete waits to see gone (nodeos/storage/snapshot_map.py): the delete would never finish."""
    kind, name = key.split(":", 1)
    if kind == "pool":
        obj = next((p for p in st["pools"].values() if p["name"] == name), None)
        return obj is not None and obj["pool_id"] == err["uuid"] and obj["state"] == "creating"
    ref = st["names"].get(name)
    if ref is None or ref["uuid"] != err["uuid"]:
        return False
    if err["step"] in RETRIED_STEPS:
        return False  # exports, resizes and role changes are retried at the next pass
    obj = st["snapshots" if kind == "snapshot" else "volumes"].get(err["uuid"])
    if obj is not None and me is not None and all(s["node"] != me for s in obj.get("placement") or ()):
        return False  # placed elsewhere since (a new volume's replica this node failed to make)
    return obj is None or obj["state"] != "deleting"


def _calls_since(before: dict[str, tuple[int, float]], now: dict[str, tuple[int, float]]) -> str:
    """The data plane calls made since `before` (Ops.call_times), the longest first."""
    spent = {m: (n - before.get(m, (0, 0.0))[0], t - before.get(m, (0, 0.0))[1]) for m, (n, t) in now.items()}
    top = sorted(((t, n, m) for m, (n, t) in spent.items() if n), reverse=True)
    return ", ".join(f"{m} x{n} {t:.1f} s" for t, n, m in top) or "none"


def batches(steps: list[Step]) -> list[list[Step]]:
    """The plan's steps in order, consecutive batched ones (volume creates, not clones) together, at most
    MAX_CREATES_TOGETHER: their data plane requests go together (nodeos/node/ops.py run_creates)."""
    out: list[list[Step]] = []
    for step in steps:
        together = opspec.BY_NAME[step.op].batched if step.op in opspec.BY_NAME else False
        if together and out and out[-1][0].op == step.op and len(out[-1]) < MAX_CREATES_TOGETHER:
            out[-1].append(step)
        else:
            out.append([step])
    return out


def _prepare(step: Step) -> Callable[[Any], None]:
    """What a step writes with its intent: its transient local record."""

    def prepare(txn: Any) -> None:
        if step.record is not None:
            txn.put(step.db, step.name, step.record)

    return prepare


def _key(step: Step) -> str:
    """The error key of a step: the kind of object it makes ("volume.snapshot" makes a snapshot)."""
    kind = "snapshot" if step.op == "volume.snapshot" else step.op.split(".")[0]
    return f"{kind}:{step.name}"
