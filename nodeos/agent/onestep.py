"""One-step snapshots of replicated volumes (issue 29): the primary holds writes for milliseconds.

The primary is the only writer of a replicated volume. When the map asks it to freeze the
volume's writes for a snapshot (nodeos/storage/snapshot_map.py, phase `freezing`), its agent
does the whole snapshot in one step instead of one phase per agent pass and map commit:

  before the hold  every replica node is asked whether it is ready (`snapshot.ready`: its map
                   holds the snapshot, its replica is ready); a replica whose map lags waits
                   here, not inside the hold. Each node, this one too, then commits its leg's
                   intent (an LMDB sync: milliseconds no write waits for); a leg prepared so
                   and not taken within PREPARED_KEPT_S, or released by the primary
                   (`snapshot.release`: it did not go on to the hold), is undone;
  before the hold  also the freeze's reads and set-up (`prepare_mirror_freeze`), so that the
                   hold begins with the one change that holds writes;
  hold             the mirror's writes frozen (`freeze_mirror_writes`: in-flight ones complete
                   on every leg, new ones wait), then at once and together: this node's leg
                   snapshotted (the same durable `volume.snapshot` operation the plan runs),
                   every replica node asked to snapshot its own (`snapshot.leg`, over the
                   authenticated peer path, each call bounded by leg_timeout_s, by its data plane);
  resume           as soon as the last of those answered (each as soon as its lvol snapshot was
                   made; its record's final commit follows), whatever it said: the mirror read back
                   while still held (every leg still a member in sync: a leg the mirror dropped
                   missed acknowledged writes, and its snapshot is no copy of this point) and the
                   writes thawed, together (`read_and_thaw_mirror`: one exchange on SPDK).

Then every leg's record: each node's `volume.snapshot` commits its final state after it answered
(an LMDB sync, milliseconds, not inside the hold); the primary waits for its own and asks each
replica node (`snapshot.settled`) before it tells the map anything. A replica restarted in between
undid its leg (the operation recovers backward): it answers that its leg is not there and the
snapshot fails as below, never reported with a leg missing.

Then the map is told: the primary reports the volume `frozen` for the snapshot (a report it only
ever sends for a point every leg holds), the map goes `taking`, and every node then reports its
leg ready (not before: `reported_state`), so the map finds every leg taken and the snapshot
ready. Nothing of the map changes: a node of an older release takes its part in the phases as
before. On any failure the writes resume at once and the primary asks the map to drop the
snapshot (`snapshot_abort`, and its own leg reported failed); the legs already taken are deleted
by their agents, as for any snapshot the map drops. A replica node of an older release (it
knows no `snapshot.ready`) leaves the snapshot to the phases of agent passes, nothing held yet.

The one step is the default; the cluster's key-value store can ask for the phases of passes on
every node (`nodeos cluster kv put nodeos/snapshot-hold passes`; `kv delete` for the default).

The decisions are pure functions below; OneStep is the shell (data plane calls and peer requests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from nodeos.agent.freeze import FREEZE_ABORT_S
from nodeos.agent.plan import snapshot_step
from nodeos.dataplane.base import MirrorInfo
from nodeos.errors import BadInput, NodeosError, NotFound, OperationFailed
from nodeos.node import crash
from nodeos.storage.map_common import replica_view

LOG = logging.getLogger("nodeosd.agent")
# How long the primary waits for a replica node's leg inside the hold (it thaws when the bound
# passes and the snapshot is dropped). An SPDK leg is one durable operation (two LMDB syncs, one
# lvol snapshot RPC): milliseconds. A kernel leg is an `lvcreate` of a thin snapshot (an LVM
# metadata commit, a suspend and resume of the origin's dm device): a second or more on a
# loaded node, so it gets the bound the phases of passes hold writes for (FREEZE_ABORT_S):
# the one step never holds longer than they may.
LEG_TIMEOUT_S = 2.0
LVM_LEG_TIMEOUT_S = FREEZE_ABORT_S
READY_TIMEOUT_S = 3.0  # a replica's map catching up with the snapshot, before the hold
PREPARED_KEPT_S = FREEZE_ABORT_S  # a leg's intent committed for a hold that never came: undone
RELEASE_TIMEOUT_S = 2.0  # the primary telling a replica node it will not hold (best effort)
SETTLE_TIMEOUT_S = 5.0  # a leg's record committed after the thaw (an LMDB sync: milliseconds)
SETTLING_KEPT_S = 60.0  # how long a replica keeps a leg's settling for the primary's question
KNOB = "nodeos/snapshot-hold"
PASSES = "passes"
ONE_STEP = "one-step"


# ---- pure -------------------------------------------------------------------------------
def enabled(st: dict[str, Any]) -> bool:
    """Whether snapshots take the one step (the default) rather than the phases of passes
    (`nodeos/snapshot-hold` = `passes`). The default since the kernel data plane's lab test of a
    snapshot under fio passed with it (2026-12-03), as the SPDK cluster's did before."""
    return (st.get("kv", {}).get(KNOB) or {}).get("value") != PASSES


def out_of_sync(st: dict[str, Any], vol: dict[str, Any]) -> list[int]:
    """The volume's replica nodes the map does not count in sync (the primary's mirror is
    "degraded" while a leg catches up: that leg is named), as check_snapshot_allowed counts them."""
    return [
        s["node"]
        for s in vol["placement"]
        if replica_view(st, vol, s["node"])["state"]
        not in (("in-sync", "degraded") if s["node"] == vol["primary"] else ("in-sync",))
    ]


def leg_timeout_s(st: dict[str, Any], node: int) -> float:
    """The bound on `node`'s leg inside the hold, by the data plane its latest report names; a
    node whose data plane the map does not know gets the longer (kernel) bound."""
    dp = ((st.get("reports") or {}).get(node) or {}).get("dataplane") or {}
    return LEG_TIMEOUT_S if dp.get("name") == "spdk" else LVM_LEG_TIMEOUT_S


def mirror_whole(info: MirrorInfo | None, legs: int) -> str | None:
    """Why the mirror, read while its writes are held, cannot vouch that every leg holds every
    acknowledged write; None when it can (all `legs` members in sync)."""
    if info is None:
        return "the mirror is not assembled"
    synced = [m for m in info.members if m.slot is not None and m.state == "in_sync"]
    if len(synced) < legs or info.degraded:
        states = ", ".join(f"{m.device or 'missing'}: {m.state}" for m in info.members)
        return f"the mirror has {len(synced)} of {legs} legs in sync ({states})"
    return None


def leg_wanted(st: dict[str, Any], me: int, frm: int, params: dict[str, Any]) -> dict[str, Any]:
    """A replica node checks a primary's request for its leg of a snapshot against its own map:
    the snapshot being taken (phase `freezing`), of a volume `frm` is the primary of at the epoch
    the request names, with a replica here. Returns the snapshot; raises otherwise."""
    uuid = params.get("snap")
    snap = st["snapshots"].get(uuid) if isinstance(uuid, str) else None
    if snap is None or snap["state"] != "creating" or snap.get("phase") != "freezing":
        raise NotFound(f"no snapshot {uuid!r} waiting for its legs here", field="snap")
    vol = st["volumes"].get(snap["volume"])
    if vol is None or vol["primary"] != frm or vol.get("epoch") != params.get("epoch"):
        raise OperationFailed(
            f"snapshot {snap['name']}: node {frm} at epoch {params.get('epoch')} is not the primary "
            f"of its volume here (primary {None if vol is None else vol['primary']}, "
            f"epoch {None if vol is None else vol.get('epoch')})",
            field="epoch",
        )
    if all(s["node"] != me for s in snap["placement"]):
        raise NotFound(f"snapshot {snap['name']} has no leg on this node", field="snap")
    return snap


def reported_state(st: dict[str, Any], rec: dict[str, Any]) -> str:
    """How a node reports its local snapshot record `rec`. A leg taken in one step is reported
    ready only once the map is `taking` (the primary's `frozen` applied): the map settles a
    snapshot on its nodes' reports, one phase per report, so a leg reported ready earlier would
    leave the map in `taking` with no report left to finish it."""
    if rec["state"] != "ready":
        return "creating"
    snap = st["snapshots"].get(rec.get("uuid") or "")
    return "creating" if snap is not None and snap.get("phase") == "freezing" else "ready"


Kind = Literal["taken", "failed", "passes"]


@dataclass
class Outcome:
    kind: Kind  # taken: every leg at one point, writes resumed; failed: resumed, dropped; passes: held
    reason: str = ""
    held_s: float = 0.0  # freeze called -> thaw returned
    frozen: bool = False  # the writes are still held (passes; or a thaw that failed)
    parts: dict[str, float] = field(default_factory=dict)  # seconds per part of the hold
    legs_s: dict[str, float] = field(default_factory=dict)  # each leg's answer, after the freeze
    settled_s: float = 0.0  # thaw -> every leg's record committed (writes flowing meanwhile)


def outcome(local: BaseException | None, whole: str | None, legs: dict[int, BaseException | None]) -> Outcome:
    """What the hold's parts add up to. A replica of an older release answers that it knows no
    `snapshot.leg`: the phases of passes take over (the writes stay frozen) when nothing else failed."""
    old = [n for n, e in legs.items() if isinstance(e, BadInput) and e.field == "method"]
    errors = [f"this node's leg: {_msg(local)}"] if local is not None else []
    errors += [] if whole is None else [whole]
    errors += [
        f"node {n}'s leg: {_msg(e)}" for n, e in sorted(legs.items()) if e is not None and n not in old
    ]
    if errors:
        return Outcome("failed", "; ".join(errors))
    if old:
        return Outcome("passes", f"node(s) {', '.join(map(str, old))} take no one-step snapshot")
    return Outcome("taken")


def unsettled(local: BaseException | None, legs: dict[int, BaseException | None]) -> str | None:
    """Why the legs' records do not all hold their legs (None: they do). A replica of an older
    release knows no `snapshot.settled`: it answered its leg after its record's commit."""
    errors = [f"this node's leg record: {_msg(local)}"] if local is not None else []
    errors += [
        f"node {n}'s leg record: {_msg(e)}"
        for n, e in sorted(legs.items())
        if e is not None and not (isinstance(e, BadInput) and e.field == "method")
    ]
    return "; ".join(errors) or None


def _msg(e: BaseException) -> str:
    return e.message if isinstance(e, NodeosError) else f"{type(e).__name__}: {e}"


# ---- shell ------------------------------------------------------------------------------
@dataclass
class Prepared:
    """A leg whose intent is committed, waiting for the hold (volume.snapshot begun)."""

    op: str
    data: dict[str, Any]
    timer: asyncio.TimerHandle


class OneStep:
    def __init__(self, agent: Any) -> None:
        self.agent = agent
        # Replica side: the final commits of legs answered, by snapshot uuid, for snapshot.settled.
        self.settling: dict[str, asyncio.Task[None]] = {}
        self.prepared: dict[str, Prepared] = {}  # by snapshot uuid, on either side
        self._giving_up: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        handlers = getattr(self.agent.cluster, "peer_handlers", None)
        if isinstance(handlers, dict):
            handlers["snapshot."] = self.serve

    def stop(self) -> None:
        handlers = getattr(self.agent.cluster, "peer_handlers", None)
        if isinstance(handlers, dict) and handlers.get("snapshot.") == self.serve:
            del handlers["snapshot."]

    # -- replica side --
    async def serve(self, frm: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        d = self.agent._driver()
        if d is None:
            raise OperationFailed("this node has no cluster map yet", field="snap")
        if method == "snapshot.ready":
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:  # this node's map may not have applied the snapshot yet
                try:
                    snap = leg_wanted(d.map.state, d.id, frm, params)
                    ready = self._volume_record(snap) is not None
                    err: NodeosError = OperationFailed(
                        f"snapshot {snap['name']}: the replica is not ready here"
                    )
                except NodeosError as e:
                    ready, err = False, e
                if ready:
                    self._prepare_leg(d.map.state, snap)  # raises: taken before
                    return {"ready": True}
                left = deadline - time.monotonic()
                if left <= 0:
                    raise err
                await asyncio.sleep(min(left, 0.01))  # map_changed is the agent's to clear
        if method == "snapshot.settled":
            return await self._settled(d.map.state, params)
        if method == "snapshot.release":
            snap = d.map.state["snapshots"].get(str(params.get("snap")))
            vol = d.map.state["volumes"].get(snap["volume"]) if snap is not None else None
            if vol is not None and vol["primary"] != frm:
                raise OperationFailed(f"node {frm} is not the primary of {vol['name']}", field="snap")
            return {"released": self._give_up(str(params.get("snap")), f"released by node {frm}")}
        if method != "snapshot.leg":
            raise BadInput(f"unknown peer method {method!r}", field="method")
        snap = leg_wanted(d.map.state, d.id, frm, params)
        task = await self._take_leg(d.map.state, snap)
        self.settling[snap["uuid"]] = task
        task.add_done_callback(lambda t, u=snap["uuid"]: self._settled_here(u, t))
        return {"snap": snap["uuid"], "state": "taken"}

    def _settled_here(self, uuid: str, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (err := task.exception()) is not None:
            LOG.error("snapshot %s: this node's leg record failed: %s", uuid, _msg(err))
        asyncio.get_running_loop().call_later(SETTLING_KEPT_S, self.settling.pop, uuid, None)

    async def _settled(self, st: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        """The primary asks, once its writes flow again, whether this node's leg is recorded."""
        uuid = params.get("snap")
        snap = st["snapshots"].get(uuid) if isinstance(uuid, str) else None
        if snap is None:
            raise NotFound(f"no snapshot {uuid!r} here", field="snap")
        task = self.settling.get(uuid)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), SETTLE_TIMEOUT_S)  # raises its failure
        rec = self.agent.node.records()[2].get(snap["name"])
        if rec is None or rec["state"] != "ready":
            raise OperationFailed(
                f"snapshot {snap['name']}: this node's leg is not recorded "
                f"({'no record' if rec is None else rec['state']}: undone by a restart?)"
            )
        return {"snap": uuid, "state": "ready"}

    def _volume_record(self, snap: dict[str, Any]) -> dict[str, Any] | None:
        local = self.agent.node.records()[1].get(snap["volume_name"])
        return local if local is not None and local["state"] == "ready" else None

    def _prepare_leg(self, st: dict[str, Any], snap: dict[str, Any]) -> None:
        """This node's leg's intent, committed before the hold; the leg is taken inside it
        (_take_leg), or given up after PREPARED_KEPT_S."""
        if snap["uuid"] in self.prepared:
            return  # asked again: a primary restarted before its hold
        step = self._leg_step(st, snap)
        data, rec = dict(step.data), dict(step.record or {})
        self.agent.node.ops.begin_op(step.op, data, lambda txn: txn.put(step.db, step.name, rec))
        why = f"no hold came within {PREPARED_KEPT_S:.0f} s"
        timer = asyncio.get_running_loop().call_later(PREPARED_KEPT_S, self._give_up, snap["uuid"], why)
        self.prepared[snap["uuid"]] = Prepared(step.op, data, timer)

    def _give_up(self, uuid: str, why: str) -> bool:
        """A prepared leg not to be taken: its intent undone (in a task). False: none here."""
        p = self.prepared.pop(uuid, None)
        if p is None:
            return False
        p.timer.cancel()
        LOG.info("snapshot %s: the leg prepared here is given up: %s", p.data.get("name"), why)
        task = asyncio.ensure_future(self.agent.node.ops.abandon_op(p.op, p.data, why))
        self._giving_up.add(task)
        task.add_done_callback(self._giving_up.discard)
        return True

    async def _take_leg(
        self, st: dict[str, Any], snap: dict[str, Any], commit_after: asyncio.Future[None] | None = None
    ) -> asyncio.Task[None]:
        """This node's leg of `snap`, by the durable operation the plan runs (begun before the
        hold when prepared); returns once the lvol snapshot is made, with the task committing
        its record."""
        ops = self.agent.node.ops
        p = self.prepared.pop(snap["uuid"], None)
        if p is not None:
            p.timer.cancel()
            return await ops.run_until_made(p.op, p.data, None, commit_after)
        step = self._leg_step(st, snap)
        rec = dict(step.record or {})
        return await ops.run_until_made(
            step.op, dict(step.data), lambda txn: txn.put(step.db, step.name, rec), commit_after
        )

    def _leg_step(self, st: dict[str, Any], snap: dict[str, Any]) -> Any:
        """The step that takes this node's leg. Once only: a leg already there was taken in an
        earlier hold, maybe at another point than the others."""
        have = self.agent.node.records()[2].get(snap["name"])
        if have is not None:
            raise OperationFailed(
                f"snapshot {snap['name']}: this node's leg was taken before ({have['state']})"
            )
        step = snapshot_step(st, snap, self._volume_record(snap))
        if step is None:
            raise OperationFailed(f"snapshot {snap['name']}: the replica is not ready here")
        return step

    # -- primary side --
    async def take(self, st: dict[str, Any], me: int, vol_uuid: str, snap_uuid: str, mid: str) -> Outcome:
        """Snapshot every leg of the volume inside one hold of its writes (see the module doc).
        Raises only when the freeze itself failed (nothing taken, nothing held by this call)."""
        snap, vol = st["snapshots"][snap_uuid], st["volumes"][vol_uuid]
        transport = getattr(self.agent.cluster, "transport", None)
        others = [s["node"] for s in snap["placement"] if s["node"] != me]
        params = {"snap": snap_uuid, "epoch": vol.get("epoch")}
        if why := self._not_now(vol, snap, others, transport):
            return Outcome("failed", why)
        try:
            await asyncio.gather(
                *(transport.request(n, "snapshot.ready", params, READY_TIMEOUT_S + 1.0) for n in others)
            )
        except NodeosError as err:
            await self._release(transport, others, params)  # those that prepared their legs
            if isinstance(err, BadInput) and err.field == "method":
                return Outcome("passes", f"a replica node takes no one-step snapshot ({err.message})")
            return Outcome("failed", f"a replica node is not ready: {err.message}")
        ops = self.agent.node.ops
        try:
            self._prepare_leg(st, snap)
        except NodeosError as err:
            await self._release(transport, others, params)
            return Outcome("failed", f"this node's leg: {err.message}")
        try:
            await ops.call("prepare_mirror_freeze", mid)  # the freeze's reads: no write held yet
            t0 = time.monotonic()
            await ops.call("freeze_mirror_writes", mid)
        except NodeosError:  # the caller aborts the snapshot: nothing taken
            self._give_up(snap_uuid, "the freeze failed")
            await self._release(transport, others, params)
            raise
        crash.point("snapshot.freeze:frozen")
        t1 = time.monotonic()
        legs = {
            n: asyncio.ensure_future(self._ask(transport, n, params, leg_timeout_s(st, n))) for n in others
        }
        # This node's record commits once the writes flow again: not on this event loop while the
        # replica nodes' answers come in.
        hold_over: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        local = asyncio.ensure_future(self._take_leg(st, snap, hold_over))
        answered: dict[str, float] = {}  # where a hold's time goes: which leg answered when
        for who, f in (("here", local), *((f"node {n}", f) for n, f in legs.items())):
            f.add_done_callback(lambda _, who=who: answered.setdefault(who, time.monotonic() - t1))
        try:
            await asyncio.wait([local, *legs.values()])
            t2 = time.monotonic()
            errs = {n: f.exception() for n, f in legs.items()}
            out = outcome(local.exception(), None, errs)
            out.frozen = True
            if out.kind != "passes":  # the passes take over a hold a replica cannot take part in
                whole, out.frozen = await self._read_and_thaw(mid, snap["name"], len(vol["placement"]))
                out = dataclasses.replace(outcome(local.exception(), whole, errs), frozen=out.frozen)
        finally:
            hold_over.set_result(None)
        t3 = time.monotonic()
        # Every leg's record, before the map is told (the writes flow meanwhile).
        if out.kind == "taken" and (why := await self._settle(transport, local.result(), others, params)):
            out = Outcome("failed", why, frozen=out.frozen)
        out.held_s = t3 - t0
        out.parts = {"freeze": t1 - t0, "legs": t2 - t1, "thaw": t3 - t2}
        out.legs_s = answered
        out.settled_s = time.monotonic() - t3
        return out

    @staticmethod
    async def _release(transport: Any, others: list[int], params: dict[str, Any]) -> None:
        """Tell the replica nodes no hold comes (best effort: a prepared leg is also given up
        after PREPARED_KEPT_S), so the phases of passes find no leg half taken."""
        await asyncio.gather(
            *(transport.request(n, "snapshot.release", params, RELEASE_TIMEOUT_S) for n in others),
            return_exceptions=True,
        )

    @staticmethod
    async def _settle(
        transport: Any, local: asyncio.Task[None], others: list[int], params: dict[str, Any]
    ) -> str | None:
        """Wait for this node's leg record and ask each replica node for its own: why they do
        not all hold their legs, or None."""
        asked = [transport.request(n, "snapshot.settled", params, SETTLE_TIMEOUT_S + 1.0) for n in others]
        mine, *theirs = await asyncio.gather(
            asyncio.wait_for(asyncio.shield(local), SETTLE_TIMEOUT_S), *asked, return_exceptions=True
        )
        errs = {n: e if isinstance(e, BaseException) else None for n, e in zip(others, theirs, strict=True)}
        return unsettled(mine if isinstance(mine, BaseException) else None, errs)

    async def _read_and_thaw(self, mid: str, name: str, legs: int) -> tuple[str | None, bool]:
        """The mirror read while the writes are still held, then the thaw: why the mirror cannot
        vouch for every leg (None: it can), and whether the writes are still held."""
        ops = self.agent.node.ops
        try:
            return mirror_whole(await ops.call("read_and_thaw_mirror", mid), legs), False
        except NodeosError as err:
            whole = f"the mirror's state unknown: {_msg(err)}"
        try:  # the thaw may not have been sent: again (a thaw is idempotent)
            await ops.call("thaw_mirror_writes", mid)
            return whole, False
        except NodeosError as e:  # held on: the freezer's bounds and the map's phases take over
            LOG.error("snapshot %s: thaw of mirror %s failed: %s", name, mid, e.message)
            return whole, True

    def _not_now(
        self, vol: dict[str, Any], snap: dict[str, Any], others: list[int], transport: Any
    ) -> str | None:
        st = self.agent._driver().map.state
        if behind := out_of_sync(st, vol):
            return f"replica(s) on node(s) {', '.join(map(str, behind))} not in sync"
        if vol["uuid"] in self.agent.legwatch.held:
            return "a leg of the mirror is lost (its writes are held until the map knows)"
        if snap["name"] in self.agent.node.records()[2] or f"snapshot:{snap['name']}" in self.agent.errors:
            # taken in an earlier hold (before a restart of nodeosd): the other legs may not be
            return "this node's leg was taken before: the legs may not hold one point"
        if others and transport is None:
            return "no peer transport to the replica nodes"
        return None

    @staticmethod
    async def _ask(transport: Any, node: int, params: dict[str, Any], timeout_s: float) -> None:
        await transport.request(node, "snapshot.leg", params, timeout_s)
