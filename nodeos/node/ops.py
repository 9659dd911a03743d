"""Durable operations: intent first, then the data plane, then the final state.

Every change to the data plane follows the same shape:
  1. one LMDB transaction records the intent and the object in a transient state
     ("creating", "deleting", ...) -- synced before step 2;
  2. the data plane steps run (each idempotent), with crash points between them;
  3. one transaction writes the final state and drops the intent.
If the daemon dies between 1 and 3, start-up finds the intent and rolls it forward or back
(opspec.py: its `recovery`). If a step fails while the daemon lives, the operation is compensated
(undone, or the object put back as it was) and the error is returned; if even that fails,
the intent stays and is retried at the next start and by the periodic retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nodeos.daemon.logsetup import fields
from nodeos.dataplane.base import Listener, MadeVolume, NewVolume
from nodeos.errors import NodeosError, NotFound, OperationFailed

from . import crash, model, opspec, orphan_ops, replicas
from .mirror_ops import MirrorOps
from .snapshot_ops import SnapshotOps

LOG = logging.getLogger("nodeosd.node")
Step = Callable[[dict[str, Any]], Awaitable[None]]


def _volumes_made() -> None:
    """The crash point between making volumes and exporting them (called in the data plane's
    worker thread, by create_volumes)."""
    crash.point("volume.create:volume-created")


class Ops:
    def __init__(
        self,
        store: Any,
        dataplane: Any,
        run_blocking: Callable[..., Awaitable[Any]],
        listeners: Callable[[], tuple[Listener, ...]],
        hosts: Callable[[], dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        self.store = store
        self._hosts = hosts
        # This node lost its primary lease: every replicated front end is ANA inaccessible.
        self.fenced = False
        # ... except these volumes, the only in-sync replica of theirs (nodeos/agent/lease.py).
        self.kept_open: frozenset[str] = frozenset()
        # Data plane calls so far by method: (count, seconds, the worker's queue included); a
        # slow agent pass logs what it spent them on.
        self.call_times: dict[str, tuple[int, float]] = {}
        self.handing_off: set[str] = set()  # volume uuids fenced for a planned handoff (agent/handoff.py)
        self.mirrors = MirrorOps(self)
        self.snapshots = SnapshotOps(self)
        # run_until_made: (its caller's wake-up, what the final commit waits for) by id() of the
        # data its forward step receives (the intent's number is known only once begun).
        self._made: dict[int, tuple[asyncio.Future[None], asyncio.Future[None] | None]] = {}
        # Intents whose run() is still going in this process: not left behind, so recovery
        # (the retry loop's, which runs beside operations not under the node's lock, such as a
        # replica's leg of a one-step snapshot) leaves them to it.
        self.in_flight: set[int] = set()
        self.dp = dataplane
        self.run_blocking = run_blocking
        self.listeners = listeners
        # One spec per operation (nodeos/node/opspec.py): its forward and compensating steps.
        self.forward: dict[str, Step] = {o.name: self._step(o.forward) for o in opspec.OPERATIONS}
        self.compensate: dict[str, Step] = {o.name: self._step(o.compensate) for o in opspec.OPERATIONS}

    def _step(self, ref: str) -> Step:
        """The callable an OpSpec names: "_method", "collaborator.method", "orphans.fn" (a function
        of nodeos/node/orphan_ops.py taking these Ops), "restore:DB" (the record put back)."""
        if ref.startswith("restore:"):
            return self._restore(ref.split(":", 1)[1], "name")
        owner, _, attr = ref.rpartition(".")
        if owner == "orphans":
            fn = getattr(orphan_ops, attr)
            return lambda d: fn(self, d)
        step: Step = getattr(getattr(self, owner) if owner else self, attr)
        return step

    # --- edges ------------------------------------------------------------------------

    async def call(self, method: str, *args: Any) -> Any:
        """A data plane call in the worker thread; foreign exceptions become OperationFailed."""
        started = time.monotonic()
        try:
            return await self.run_blocking(getattr(self.dp, method), *args)
        except NodeosError:
            raise
        except Exception as exc:
            raise OperationFailed(f"data plane {method} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            n, took = self.call_times.get(method, (0, 0.0))
            self.call_times[method] = (n + 1, took + time.monotonic() - started)

    def hosts(self, txn: Any) -> dict[str, dict[str, Any]]:
        return {h["nqn"]: h for _, h in txn.items("hosts")}

    def spec_for(self, vol: dict[str, Any]) -> Any:
        """The export a volume record asks for; host secrets come from the cluster map."""
        if self._hosts is not None:
            hosts = self._hosts()
        else:
            with self.store.read() as txn:
                hosts = self.hosts(txn)
        uuid = vol.get("uuid")
        fenced = (self.fenced and uuid not in self.kept_open) or uuid in self.handing_off
        return model.export_spec(vol, self.listeners(), hosts, fenced)

    # --- the intent engine ------------------------------------------------------------

    @staticmethod
    def begin(txn: Any, op: str, data: dict[str, Any]) -> int:
        """Record an intent inside the caller's transaction; returns its sequence number."""
        seq = int(txn.get("meta", "intent_seq", 0)) + 1
        txn.put("meta", "intent_seq", seq)
        data["_seq"] = seq
        data["op"] = op
        txn.put("intents", seq, {"seq": seq, "op": op, "data": data, "started": time.time()})
        return seq

    @staticmethod
    def end(txn: Any, data: dict[str, Any]) -> None:
        txn.delete("intents", int(data["_seq"]))

    async def run(self, op: str, data: dict[str, Any], prepare: Callable[[Any], None]) -> None:
        """Fresh operation: `prepare(txn)` writes the transient records with the intent."""
        self.begin_op(op, data, prepare)
        await self.run_begun(op, data)

    def begin_op(self, op: str, data: dict[str, Any], prepare: Callable[[Any], None]) -> None:
        """Step 1 alone (committed, synced): the operation is this process's to run (run_begun)
        or give up (abandon_op) from here; recovery leaves it alone meanwhile."""
        with self.store.write() as txn:
            prepare(txn)
            self.begin(txn, op, data)
        self.in_flight.add(int(data["_seq"]))
        crash.point(f"{op}:intent")
        LOG.info("%s %s: intent %d recorded", op, data.get("name"), data["_seq"], extra=fields(op=op))

    async def run_begun(self, op: str, data: dict[str, Any]) -> None:
        """Steps 2 and 3 of an operation begun by begin_op (compensated when they fail)."""
        try:
            try:
                await self.forward[op](data)
            except Exception as err:
                await self._compensate(op, data, err)
                raise
        finally:
            self.in_flight.discard(int(data["_seq"]))
        crash.point(f"{op}:done")

    async def abandon_op(self, op: str, data: dict[str, Any], why: str) -> None:
        """An operation begun by begin_op and not run after all: compensated, as if it failed."""
        try:
            await self._compensate(op, data, why)
        finally:
            self.in_flight.discard(int(data["_seq"]))

    async def run_until_made(
        self,
        op: str,
        data: dict[str, Any],
        prepare: Callable[[Any], None] | None,
        commit_after: asyncio.Future[None] | None = None,
    ) -> asyncio.Task[None]:
        """run() in a task of its own, returned once the data plane change is made (its forward
        step calls made()); the task commits the final state after `commit_after`, if given. For
        a one-step snapshot's leg (nodeos/agent/onestep.py): its primary needs every record before
        it tells the map, not inside its hold. `prepare` None: begun already (begin_op), so no
        commit at all comes before the change. Raises what run() raised before the change."""
        made: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._made[id(data)] = (made, commit_after)
        run = self.run(op, data, prepare) if prepare is not None else self.run_begun(op, data)
        task = asyncio.ensure_future(run)
        task.add_done_callback(lambda t: self._ended_before_made(made, t))
        try:
            await made  # woken at once by made(): the answer goes out before the final commit
        finally:
            self._made.pop(id(data), None)
        return task

    @staticmethod
    def _ended_before_made(made: asyncio.Future[None], task: asyncio.Task[None]) -> None:
        if made.done():  # else ended without a change: its failure, or nothing to wait for
            return
        if task.cancelled():
            made.cancel()
        elif (err := task.exception()) is not None:
            made.set_exception(err)
        else:
            made.set_result(None)

    async def made(self, data: dict[str, Any]) -> None:
        """A forward step made its data plane change: a run_until_made caller answers (it wakes
        first), and the final commit waits for what that caller asked it to."""
        waiter, after = self._made.get(id(data), (None, None))
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        await (asyncio.shield(after) if after is not None else asyncio.sleep(0))

    async def run_creates(
        self, items: list[tuple[dict[str, Any], Callable[[Any], None]]]
    ) -> list[Exception | None]:
        """volume.create of one or more volumes (an agent pass's) as one: their intents in one
        transaction, their data plane requests sent together (one create_volumes call),
        their final states in one transaction. Each keeps its own intent, so recovery and
        compensation are per volume; the result is each one's error, or None."""
        op = "volume.create"
        with self.store.write() as txn:
            for data, prepare in items:
                prepare(txn)
                self.begin(txn, op, data)
        datas = [data for data, _ in items]
        seqs = {int(data["_seq"]) for data in datas}
        self.in_flight |= seqs
        try:
            crash.point(f"{op}:intent")
            for data in datas:
                LOG.info("%s %s: intent %d recorded", op, data.get("name"), data["_seq"], extra=fields(op=op))
            try:
                errors = await self._volume_create_many(datas)
            except Exception as err:  # e.g. the store: none is known to be done
                errors = [err] * len(datas)
            for data, err in zip(datas, errors, strict=True):
                if err is not None:
                    await self._compensate(op, data, err)
        finally:
            self.in_flight -= seqs
        if None in errors:  # as run(): passed once something was done
            crash.point(f"{op}:done")
        return errors

    async def _compensate(self, op: str, data: dict[str, Any], err: Exception | str) -> None:
        LOG.warning("%s %s failed (%s); compensating", op, data.get("name"), err, extra=fields(op=op))
        try:
            await self.compensate[op](data)
        except Exception as err2:
            LOG.error(
                "%s %s: compensation failed too (%s); intent %d kept for retry",
                op,
                data.get("name"),
                err2,
                data["_seq"],
                extra=fields(op=op),
            )

    def pending(self) -> list[dict[str, Any]]:
        with self.store.read() as txn:
            return [v for _, v in txn.items("intents")]

    async def recover(self) -> list[dict[str, Any]]:
        """Finish or undo every intent left behind, oldest first. Returns what was done."""
        report: list[dict[str, Any]] = []
        for intent in self.pending():
            if intent["seq"] in self.in_flight:
                continue  # still being run: its runner finishes or compensates it
            op, data = intent["op"], dict(intent["data"])
            data["_seq"] = intent["seq"]
            data["op"] = op
            how = opspec.BY_NAME[op].recovery if op in opspec.BY_NAME else "forward"
            step = self.forward[op] if how == "forward" else self.compensate[op]
            entry = {
                "seq": intent["seq"],
                "op": op,
                "name": data.get("name"),
                "uuid": data.get("uuid"),
                "action": how,
            }
            try:
                await step(data)
                entry["result"] = "ok"
            except Exception as err:
                entry["error"] = str(err)
                if how == "forward":
                    try:
                        await self.compensate[op](data)
                        entry["result"] = "rolled back after failure"
                    except Exception as err2:
                        entry["result"] = "pending"
                        entry["error"] = f"{err}; rollback: {err2}"
                else:
                    entry["result"] = "pending"
            LOG.warning(
                "recovery: %s %s -> %s %s",
                op,
                data.get("name"),
                how,
                entry["result"],
                extra=fields(op=op, intent=intent["seq"]),
            )
            report.append(entry)
        return report

    # --- pools ------------------------------------------------------------------------

    async def _pool_create(self, d: dict[str, Any]) -> None:
        with self.store.read() as txn:
            pool = txn.get("pools", d["name"])
        if pool is None:
            return self._drop(d)
        info = await self.call("create_pool", pool["pool_id"], list(pool["devices"]))
        crash.point("pool.create:pool-created")
        with self.store.write() as txn:
            pool = dict(txn.get("pools", d["name"]), state="ready", size_bytes=info.size_bytes)
            txn.put("pools", d["name"], pool)
            self.end(txn, d)

    async def _undo_pool_create(self, d: dict[str, Any]) -> None:
        with self.store.read() as txn:
            pool = txn.get("pools", d["name"])
        if pool is not None:
            await self.call("delete_pool", pool["pool_id"])
        with self.store.write() as txn:
            txn.delete("pools", d["name"])
            self.end(txn, d)

    async def _pool_delete(self, d: dict[str, Any]) -> None:
        with self.store.read() as txn:
            pool = txn.get("pools", d["name"])
        if pool is not None:
            await self.call("delete_pool", pool["pool_id"])
        crash.point("pool.delete:pool-deleted")
        with self.store.write() as txn:
            txn.delete("pools", d["name"])
            self.end(txn, d)

    def _restore(self, db: str, key: str) -> Step:
        """Compensation for a failed delete: the object is back to ready, untouched."""

        async def step(d: dict[str, Any]) -> None:
            with self.store.write() as txn:
                rec = txn.get(db, d[key])
                if rec is not None:
                    txn.put(db, d[key], dict(rec, state="ready"))
                self.end(txn, d)

        return step

    def _drop(self, d: dict[str, Any]) -> None:
        with self.store.write() as txn:
            self.end(txn, d)

    # --- volumes ----------------------------------------------------------------------

    async def _volume_create(self, d: dict[str, Any]) -> None:
        if not d.get("snap_id"):
            err = (await self._volume_create_many([d]))[0]
            if err is not None:
                raise err
            return
        with self.store.read() as txn:
            vol = txn.get("volumes", d["name"])
        if vol is None:
            return self._drop(d)
        info = await self.call("clone_snapshot", vol["pool_id"], d["snap_id"], vol["vol_id"])
        crash.point("volume.clone:clone-created")
        export = None
        if not replicas.replicated(vol):
            export = await self.call("apply_export", self.spec_for(vol))
            crash.point("volume.clone:export-applied")
        self._created([d], [vol], [MadeVolume(info, export)])

    async def _volume_create_many(self, ds: list[dict[str, Any]]) -> list[Exception | None]:
        """The forward steps of volume.create for each of `ds` (their intents recorded): the
        volumes made and exported together (the data plane's create_volumes; a replicated one is
        exported later, by volume.replica / volume.mirror, once the other replicas are there)."""
        with self.store.read() as txn:
            vols = [txn.get("volumes", d["name"]) for d in ds]
        made = [i for i, v in enumerate(vols) if v is not None]
        results: list[Any] = [None] * len(ds)  # a volume the record no longer holds: nothing to make
        if made:
            wanted = [
                NewVolume(
                    vols[i]["pool_id"],
                    vols[i]["vol_id"],
                    replicas.lv_size(vols[i], self.dp.mirror_caps),
                    None if replicas.replicated(vols[i]) else self.spec_for(vols[i]),
                )
                for i in made
            ]
            for i, res in zip(made, await self.call("create_volumes", wanted, _volumes_made), strict=True):
                results[i] = res
            if any(w.export is not None for w in wanted):
                crash.point("volume.create:export-applied")
        return self._created(ds, vols, results)

    def _created(
        self, ds: list[dict[str, Any]], vols: list[Any], results: list[Any]
    ) -> list[Exception | None]:
        """Every final state and the end of every intent in one transaction; each one's error.
        `results`: each volume's MadeVolume, its error, or None when its record is gone."""
        errors: list[Exception | None] = [r if isinstance(r, Exception) else None for r in results]
        if None not in errors:
            return errors  # nothing to write: every intent stays for its compensation
        with self.store.write() as txn:
            for d, vol, res, err in zip(ds, vols, results, errors, strict=True):
                if err is not None:
                    continue  # its intent stays for the compensation
                if vol is not None:
                    if replicas.replicated(vol):
                        rec = dict(vol, state="standby", lv_device=res.volume.device)
                    else:
                        rec = dict(vol, state="ready", size_bytes=res.volume.size_bytes)
                    txn.put("volumes", d["name"], rec)
                self.end(txn, d)
        return errors

    async def _undo_volume_create(self, d: dict[str, Any]) -> None:
        with self.store.read() as txn:
            vol = txn.get("volumes", d["name"])
        if vol is not None:
            await self.call("remove_export", vol["nqn"])
            if replicas.replicated(vol):
                await self.mirrors.teardown(vol)
            await self.call("delete_volume", vol["pool_id"], vol["vol_id"])
        with self.store.write() as txn:
            txn.delete("volumes", d["name"])
            self.end(txn, d)

    async def _volume_resize(self, d: dict[str, Any]) -> None:
        with self.store.read() as txn:
            vol = txn.get("volumes", d["name"])
        if vol is None:
            return self._drop(d)
        if replicas.replicated(vol):
            return await self.mirrors.grow(d, vol)
        info = await self.call("resize_volume", vol["pool_id"], vol["vol_id"], int(d["size_bytes"]))
        crash.point("volume.resize:volume-resized")
        vol = dict(vol, size_bytes=info.size_bytes)
        await self.call("apply_export", self.spec_for(vol))
        crash.point("volume.resize:export-applied")
        with self.store.write() as txn:
            txn.put("volumes", d["name"], dict(vol, state="ready"))
            self.end(txn, d)

    async def _undo_volume_resize(self, d: dict[str, Any]) -> None:
        # The size only changes on success; the record keeps the old size until then.
        await self._restore("volumes", "name")(d)

    async def _volume_delete(self, d: dict[str, Any]) -> None:
        with self.store.read() as txn:
            vol = txn.get("volumes", d["name"])
        if vol is None:
            return self._drop(d)
        await self.call("remove_export", vol["nqn"])
        crash.point("volume.delete:export-removed")
        if replicas.replicated(vol):
            await self.mirrors.teardown(vol)
        await self.call("delete_volume", vol["pool_id"], vol["vol_id"])
        crash.point("volume.delete:volume-deleted")
        with self.store.write() as txn:
            txn.delete("volumes", d["name"])
            self.end(txn, d)

    async def _undo_volume_delete(self, d: dict[str, Any]) -> None:
        with self.store.read() as txn:
            vol = txn.get("volumes", d["name"])
        if vol is not None:
            await self.call("apply_export", self.spec_for(vol))
        await self._restore("volumes", "name")(d)

    async def _volume_export(self, d: dict[str, Any]) -> None:
        """Grant/revoke: the record already holds the new host list; make the export match."""
        with self.store.read() as txn:
            vol = txn.get("volumes", d["name"])
        if vol is None:
            return self._drop(d)
        spec = self.spec_for(vol)
        try:
            await self.call("apply_export", spec)
        except NotFound as err:
            revoked = set(d.get("old_hosts") or ()) - {h.host_nqn for h in spec.hosts}
            if err.field in ("vol_id", "device") and revoked:
                # The device is gone (a pulled drive): the export cannot be made whole, but a host
                # the map took access from loses it now, not once the drive is back.
                try:
                    gone = await self.call("revoke_hosts", spec.nqn, [h.host_nqn for h in spec.hosts])
                    LOG.warning("volume %s: %s; access of %s revoked", d["name"], err.message, gone)
                except NodeosError as e:
                    LOG.error("volume %s: hosts not revoked either: %s", d["name"], e.message)
            raise
        crash.point(f"{d['op']}:export-applied")
        with self.store.write() as txn:
            txn.put("volumes", d["name"], dict(txn.get("volumes", d["name"]), state="ready"))
            self.end(txn, d)

    async def _undo_volume_export(self, d: dict[str, Any]) -> None:
        with self.store.write() as txn:
            vol = txn.get("volumes", d["name"])
            if vol is not None:
                vol = dict(vol, hosts=list(d["old_hosts"]), state="ready")
                txn.put("volumes", d["name"], vol)
        if vol is not None:
            await self.call("apply_export", self.spec_for(vol))
        self._drop(d)
