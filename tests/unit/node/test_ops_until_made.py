"""A durable operation whose caller answers once its data plane change is made (a one-step
snapshot's leg, nodeos/agent/onestep.py), on a real LMDB store: the answer comes with the intent
still recorded, the final commit follows (after what the caller asks it to wait for), and a
daemon gone between the two undoes the change at its next start (volume.snapshot recovers
backward), so a leg answered but never recorded cannot survive."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodeos.daemon.main import NODE_DBS
from nodeos.errors import OperationFailed
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store


class RecordingPlane:
    """The two data plane calls a snapshot makes, recorded (the unit tier has no lvstore)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail

    def snapshot_volume(self, pool_id: str, vol_id: str, snap_id: str) -> Any:
        self.calls.append(("snapshot_volume", pool_id, vol_id, snap_id))
        if self.fail:
            raise OperationFailed("lvol snapshot failed")
        return SimpleNamespace(size_bytes=1 << 20)

    def delete_volume(self, pool_id: str, vol_id: str) -> None:
        self.calls.append(("delete_volume", pool_id, vol_id))


async def _direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "node", dbs=NODE_DBS)
    yield s
    s.close()


REC = {"name": "s", "uuid": "s-1", "pool_id": "p1", "snap_id": "ss1", "state": "creating"}


def _state(store: Store) -> tuple[str | None, int]:
    with store.read() as txn:
        rec = txn.get("snapshots", "s")
        return (None if rec is None else rec["state"]), len(list(txn.items("intents")))


def _put(txn: Any) -> None:
    txn.put("snapshots", "s", dict(REC))


def test_the_caller_answers_on_the_change_and_the_record_follows(store: Store) -> None:
    plane = RecordingPlane()
    ops = Ops(store, plane, _direct, lambda: ())

    async def go() -> None:
        gate = asyncio.get_running_loop().create_future()
        task = await ops.run_until_made("volume.snapshot", {"name": "s", "vol_id": "v1"}, _put, gate)
        assert plane.calls == [("snapshot_volume", "p1", "v1", "ss1")]  # made ...
        assert _state(store) == ("creating", 1)  # ... under its intent, not yet recorded
        await asyncio.sleep(0.05)
        assert _state(store) == ("creating", 1) and not task.done()  # the commit waits for the gate
        gate.set_result(None)
        await task
        assert _state(store) == ("ready", 0)

    asyncio.run(go())


def test_a_daemon_gone_between_the_answer_and_the_record_undoes_the_change(store: Store) -> None:
    plane = RecordingPlane()

    async def answered_then_gone() -> None:
        ops = Ops(store, plane, _direct, lambda: ())
        gate = asyncio.get_running_loop().create_future()  # never set: the commit never comes
        task = await ops.run_until_made("volume.snapshot", {"name": "s", "vol_id": "v1"}, _put, gate)
        task.cancel()

    asyncio.run(answered_then_gone())
    assert _state(store) == ("creating", 1)
    report = asyncio.run(Ops(store, plane, _direct, lambda: ()).recover())  # the next start
    assert [(r["action"], r["result"]) for r in report] == [("backward", "ok")]
    assert plane.calls[-1] == ("delete_volume", "p1", "ss1") and _state(store) == (None, 0)


def test_a_change_that_fails_is_raised_to_the_caller_and_compensated(store: Store) -> None:
    ops = Ops(store, RecordingPlane(fail=True), _direct, lambda: ())

    async def go() -> None:
        with pytest.raises(OperationFailed, match="lvol snapshot failed"):
            await ops.run_until_made("volume.snapshot", {"name": "s", "vol_id": "v1"}, _put)

    asyncio.run(go())
    assert _state(store) == (None, 0)  # undone: no record, no intent


def test_recovery_leaves_an_operation_still_running_to_its_runner(store: Store) -> None:
    """The retry loop's recovery runs beside operations not under the node's lock (a replica's
    leg answered, its record still to come): such an intent is not left behind, and undoing it
    would delete the snapshot its runner is about to record ready."""
    plane = RecordingPlane()
    ops = Ops(store, plane, _direct, lambda: ())

    async def go() -> None:
        gate = asyncio.get_running_loop().create_future()
        task = await ops.run_until_made("volume.snapshot", {"name": "s", "vol_id": "v1"}, _put, gate)
        assert await ops.recover() == []  # in flight: left alone
        gate.set_result(None)
        await task
        assert await ops.recover() == []

    asyncio.run(go())
    assert [c[0] for c in plane.calls] == ["snapshot_volume"] and _state(store) == ("ready", 0)


def test_a_leg_begun_before_the_hold_commits_nothing_until_its_change_is_made(store: Store) -> None:
    """A one-step leg's intent is committed before the primary holds the writes (begin_op): inside
    the hold there is the data plane's change and no LMDB sync at all."""
    plane = RecordingPlane()
    ops = Ops(store, plane, _direct, lambda: ())
    data = {"name": "s", "vol_id": "v1", "uuid": "s-1"}

    async def go() -> None:
        ops.begin_op("volume.snapshot", data, _put)
        assert _state(store) == ("creating", 1) and await ops.recover() == []  # in flight
        before = store.last_txn_id()
        gate = asyncio.get_running_loop().create_future()
        task = await ops.run_until_made("volume.snapshot", data, None, gate)
        assert plane.calls == [("snapshot_volume", "p1", "v1", "ss1")]
        assert store.last_txn_id() == before  # no commit between the hold's start and the answer
        gate.set_result(None)
        await task
        assert _state(store) == ("ready", 0)

    asyncio.run(go())


def test_a_leg_given_up_is_undone_and_never_takes_a_newer_snapshot_of_its_name(store: Store) -> None:
    plane = RecordingPlane()
    ops = Ops(store, plane, _direct, lambda: ())
    mine = {"name": "s", "vol_id": "v1", "uuid": "s-1"}
    asyncio.run(_begin_then_abandon(ops, mine))
    assert plane.calls == [("delete_volume", "p1", "ss1")] and _state(store) == (None, 0)
    # Given up late: meanwhile that snapshot was dropped and a new one of the same name recorded.
    plane.calls.clear()
    ops.begin_op("volume.snapshot", dict(mine), _put)
    with store.write() as txn:
        txn.put("snapshots", "s", dict(REC, uuid="s-2", snap_id="ss2", state="ready"))
    asyncio.run(_abandon(ops, "volume.snapshot", next(iter(ops.in_flight))))
    assert plane.calls == [] and _state(store) == ("ready", 0)  # s-2 kept, the old intent ended


async def _begin_then_abandon(ops: Ops, data: dict[str, Any]) -> None:
    ops.begin_op("volume.snapshot", data, _put)
    await ops.abandon_op("volume.snapshot", data, "no hold came")
    assert ops.in_flight == set()


async def _abandon(ops: Ops, op: str, seq: int) -> None:
    intent = next(i for i in ops.pending() if i["seq"] == seq)
    await ops.abandon_op(op, dict(intent["data"]), "no hold came")
