"""The durable `orphan.remove` operation on a real LMDB store with the witness data plane (which
refuses every change): a leftover that got a local record again is never touched, and a removal
that fails, live or at recovery, leaves no intent behind (the leftover is found again later)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.daemon.main import NODE_DBS
from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.select import NoDataPlane
from nodeos.errors import NotSupported
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store

UUID = "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"
SHORT = UUID.replace("-", "")[:24]


async def _direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "node", dbs=NODE_DBS)
    yield s
    s.close()


def _data() -> dict[str, Any]:
    return {
        "name": f"volume:{SHORT}",
        "kind": "volume",
        "uuid": UUID,
        "short": SHORT,
        "lvs": [["pool3", "v" + UUID.replace("-", "")]],
        "exports": [names.volume_nqn(UUID)],
        "mirror": None,
        "remotes": [],
        "views": False,
    }


def _pending(store: Store) -> list[dict[str, Any]]:
    with store.read() as txn:
        return [v for _, v in txn.items("intents")]


def test_a_leftover_recorded_again_is_left_alone_and_its_intent_ends(store: Store) -> None:
    with store.write() as txn:
        txn.put("volumes", "v", {"name": "v", "uuid": UUID, "state": "creating"})
        Ops.begin(txn, "orphan.remove", _data())
    # The witness data plane refuses any removal: "ok" means nothing was asked of it.
    (entry,) = asyncio.run(Ops(store, NoDataPlane(), _direct, lambda: ()).recover())
    assert (entry["action"], entry["result"]) == ("forward", "ok")
    assert _pending(store) == []
    with store.read() as txn:
        assert txn.get("volumes", "v")["state"] == "creating"


def test_a_leftover_named_by_another_kind_of_record_is_left_alone_too(store: Store, tmp_path: Path) -> None:
    s = Store(tmp_path / "node2", dbs=[*NODE_DBS, "published"])
    try:
        with s.write() as txn:
            txn.put("published", "m", {"name": "m", "uuid": UUID, "state": "copying"})
            Ops.begin(txn, "orphan.remove", _data())
        (entry,) = asyncio.run(Ops(s, NoDataPlane(), _direct, lambda: ()).recover())
        assert entry["result"] == "ok" and _pending(s) == []
    finally:
        s.close()


def test_a_removal_that_fails_ends_its_intent_live_and_at_recovery(store: Store) -> None:
    ops = Ops(store, NoDataPlane(), _direct, lambda: ())
    with pytest.raises(NotSupported):
        asyncio.run(ops.run("orphan.remove", _data(), lambda txn: None))
    assert _pending(store) == []
    with store.write() as txn:
        Ops.begin(txn, "orphan.remove", _data())
    (entry,) = asyncio.run(ops.recover())
    assert entry["result"] == "rolled back after failure" and "without a data plane" in entry["error"]
    assert _pending(store) == []
