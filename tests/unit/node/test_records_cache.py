"""The node's records as the agent reads them, several times a pass: read again from LMDB only
after a write committed (by this process or another), never stale."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.daemon.main import NODE_DBS
from nodeos.daemon.service import DaemonContext
from nodeos.node.service import NodeService
from nodeos.store.lmdb_store import Store


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeService]:
    store = Store(tmp_path / "node", dbs=NODE_DBS)
    ctx = DaemonContext(
        node_id="0" * 32,
        node_name="n1",
        state_dir=tmp_path,
        store=store,
        dataplane=None,
        dataplane_reason="test",
        peer_listen=None,
        storage_addresses=[],
    )
    yield NodeService(ctx)
    store.close()


def test_records_follow_every_committed_write_and_are_not_read_again_without_one(
    node: NodeService, tmp_path: Path
) -> None:
    assert node.records() == ({}, {}, {})
    with node.store.write() as txn:
        txn.put("volumes", "v1", {"name": "v1", "state": "creating"})
    first = node.records()
    assert first[1] == {"v1": {"name": "v1", "state": "creating"}}
    assert node.records() is first  # nothing committed since: the same read
    with node.store.write() as txn:
        txn.put("volumes", "v1", {"name": "v1", "state": "ready"})
        txn.put("snapshots", "s1", {"name": "s1", "state": "ready"})
    assert node.records()[1]["v1"]["state"] == "ready"
    assert set(node.records()[2]) == {"s1"}
    # A commit by another process on the same files counts too.
    code = (
        "import sys; from nodeos.daemon.main import NODE_DBS; from nodeos.store.lmdb_store import Store\n"
        "s = Store(sys.argv[1], dbs=NODE_DBS)\n"
        "with s.write() as txn: txn.delete('volumes', 'v1')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "node")], check=True, timeout=60)
    assert node.records()[1] == {}
