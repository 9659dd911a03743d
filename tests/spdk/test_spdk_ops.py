"""The intent engine's volume creates on a REAL nvmf_tgt (marker `spdk`, issue 11): the creates of
one agent pass are made together, each under its own intent in a real LMDB store, so one that
fails is undone alone, and a pass killed half-way is finished volume by volume at the next start."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.daemon.main import NODE_DBS
from nodeos.dataplane.base import Listener, NewVolume
from nodeos.errors import NotFound
from nodeos.node import model
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store
from tests.spdk.conftest import SpdkTarget, free_port

pytestmark = pytest.mark.spdk

MIB = 1024 * 1024
POOL = {"name": "p", "pool_id": "ops1"}


async def _direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


@pytest.fixture(scope="module")
def pool(spdk_target: SpdkTarget) -> str:
    f = spdk_target.workdir / "ops-drive.img"
    with open(f, "wb") as fh:
        fh.truncate(512 * MIB)
    drive = spdk_target.dp.create_aio_drive_for_tests("AIOops", str(f))
    return spdk_target.dp.create_pool(POOL["pool_id"], [drive]).pool_id


@pytest.fixture
def ops(tmp_path: Path, spdk_target: SpdkTarget, pool: str) -> Iterator[Ops]:
    store = Store(tmp_path / "node", dbs=NODE_DBS)
    listener = Listener("tcp", "127.0.0.1", str(free_port()))
    yield Ops(store, spdk_target.dp, _direct, lambda: (listener,))
    store.close()


def _records(ops: Ops) -> dict[str, dict[str, Any]]:
    with ops.store.read() as txn:
        return {bytes(k).decode(): v for k, v in txn.items("volumes")}


def _put(vol: dict[str, Any]) -> Any:
    return lambda txn: txn.put("volumes", vol["name"], vol)


def test_creates_made_together_each_under_its_own_intent(ops: Ops, spdk_target: SpdkTarget) -> None:
    vols = [model.new_volume(f"c{i}", POOL, 16 * MIB) for i in range(3)]
    vols[1]["pool_id"] = "gone"  # refused by the data plane (no such pool): undone alone
    errors = asyncio.run(ops.run_creates([({"name": v["name"]}, _put(v)) for v in vols]))
    assert errors[0] is None and errors[2] is None and isinstance(errors[1], NotFound)
    recs = _records(ops)
    assert sorted(recs) == ["c0", "c2"] and {r["state"] for r in recs.values()} == {"ready"}
    assert ops.pending() == []
    for v in (vols[0], vols[2]):
        info = spdk_target.dp.export_info(v["nqn"])
        assert info is not None and info.vol_id == v["vol_id"] and info.listeners == ops.listeners()
        spdk_target.dp.remove_export(v["nqn"])
        spdk_target.dp.delete_volume(POOL["pool_id"], v["vol_id"])


def test_a_pass_killed_after_its_volumes_were_made_is_finished_volume_by_volume(
    ops: Ops, spdk_target: SpdkTarget
) -> None:
    """As `kill -9` at volume.create:volume-created of a pass of three: intents and records
    written together, the lvols made, no export; the next start's recovery finishes each."""
    vols = [model.new_volume(f"k{i}", POOL, 16 * MIB) for i in range(3)]
    with ops.store.write() as txn:
        for v in vols:
            _put(v)(txn)
            Ops.begin(txn, "volume.create", {"name": v["name"]})
    spdk_target.dp.create_volumes([NewVolume(POOL["pool_id"], v["vol_id"], 16 * MIB) for v in vols])
    report = asyncio.run(ops.recover())
    assert [(r["name"], r["action"], r["result"]) for r in report] == [
        (v["name"], "forward", "ok") for v in vols
    ]
    assert {r["state"] for r in _records(ops).values()} == {"ready"} and ops.pending() == []
    for v in vols:
        info = spdk_target.dp.export_info(v["nqn"])
        assert info is not None and info.vol_id == v["vol_id"]
        spdk_target.dp.remove_export(v["nqn"])
        spdk_target.dp.delete_volume(POOL["pool_id"], v["vol_id"])
