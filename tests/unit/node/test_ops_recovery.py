"""The intent engine on a real LMDB store with the witness data plane (the one backend that
runs on any host): intents are durable, recovery drops intents whose work is already done,
and an intent that cannot be finished nor undone stays pending instead of being forgotten."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nodeos.daemon.main import NODE_DBS
from nodeos.dataplane.select import NoDataPlane
from nodeos.errors import NotSupported
from nodeos.node import model
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store


async def _direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "node", dbs=NODE_DBS)
    yield s
    s.close()


def _ops(store: Store) -> Ops:
    return Ops(store, NoDataPlane(), _direct, lambda: ())


def _pending(store: Store) -> list[dict[str, Any]]:
    with store.read() as txn:
        return [v for _, v in txn.items("intents")]


def test_intents_get_increasing_sequence_numbers_and_survive_reopen(tmp_path: Path) -> None:
    s = Store(tmp_path / "node", dbs=NODE_DBS)
    with s.write() as txn:
        a = Ops.begin(txn, "volume.delete", {"name": "a"})
        b = Ops.begin(txn, "volume.delete", {"name": "b"})
    assert b == a + 1
    s.close()
    s = Store(tmp_path / "node", dbs=NODE_DBS)
    assert [(i["seq"], i["op"], i["data"]["name"]) for i in _pending(s)] == [
        (a, "volume.delete", "a"),
        (b, "volume.delete", "b"),
    ]
    s.close()


def test_recovery_drops_intents_whose_object_is_gone(store: Store) -> None:
    with store.write() as txn:
        Ops.begin(txn, "volume.delete", {"name": "gone"})
        Ops.begin(txn, "volume.snapshot", {"name": "gone-snap", "vol_id": "v1"})
        Ops.begin(txn, "volume.grant", {"name": "gone", "old_hosts": []})
    report = asyncio.run(_ops(store).recover())
    assert [r["result"] for r in report] == ["ok", "ok", "ok"]
    assert [r["action"] for r in report] == ["forward", "backward", "forward"]
    assert _pending(store) == []


def test_intent_that_can_neither_finish_nor_roll_back_stays_pending(store: Store) -> None:
    vol = model.new_volume("v1", {"name": "p", "pool_id": "pp"}, 1 << 30)
    with store.write() as txn:
        txn.put("volumes", "v1", vol)
        Ops.begin(txn, "volume.create", {"name": "v1"})
    report = asyncio.run(_ops(store).recover())
    assert report[0]["result"] == "pending" and "without a data plane" in report[0]["error"]
    assert len(_pending(store)) == 1
    with store.read() as txn:
        assert txn.get("volumes", "v1")["state"] == "creating"  # not silently forgotten


def test_failed_fresh_operation_raises_and_keeps_its_intent_when_undo_fails(store: Store) -> None:
    ops = _ops(store)
    vol = model.new_volume("v1", {"name": "p", "pool_id": "pp"}, 1 << 30)
    with pytest.raises(NotSupported):
        asyncio.run(ops.run("volume.create", {"name": "v1"}, lambda txn: txn.put("volumes", "v1", vol)))
    assert [i["op"] for i in _pending(store)] == ["volume.create"]


def test_failed_delete_is_compensated_back_to_ready(store: Store) -> None:
    pool = {"name": "p", "pool_id": "pp", "drives": [], "devices": [], "state": "ready"}
    with store.write() as txn:
        txn.put("pools", "p", pool)
    ops = _ops(store)
    with pytest.raises(NotSupported):
        asyncio.run(
            ops.run(
                "pool.delete", {"name": "p"}, lambda txn: txn.put("pools", "p", dict(pool, state="deleting"))
            )
        )
    with store.read() as txn:
        assert txn.get("pools", "p")["state"] == "ready"
    assert _pending(store) == []
