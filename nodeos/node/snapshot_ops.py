"""Durable operations of snapshots (the intent engine: nodeos/node/ops.py).

volume.snapshot: the lvol (or thin LV) snapshot of a volume, recorded ready. It recovers
  backward: a crash before its record leaves nothing behind, so a one-step snapshot's leg
  (nodeos/agent/onestep.py), answered as soon as the snapshot is made, is either recorded or
  undone, never half there. Undo deletes only the snapshot its own intent names (by uuid): a
  leg given up late must not take a newer snapshot of the same name with it.
snapshot.delete: the snapshot out of the data plane, then its record.
"""

from __future__ import annotations

from typing import Any

from . import crash


class SnapshotOps:
    def __init__(self, ops: Any) -> None:
        self.ops = ops

    async def create(self, d: dict[str, Any]) -> None:
        ops = self.ops
        with ops.store.read() as txn:
            snap = txn.get("snapshots", d["name"])
        if snap is None:
            return ops._drop(d)  # type: ignore[no-any-return]
        info = await ops.call("snapshot_volume", snap["pool_id"], d["vol_id"], snap["snap_id"])
        crash.point("volume.snapshot:snapshot-created")
        await ops.made(d)
        with ops.store.write() as txn:
            txn.put("snapshots", d["name"], dict(snap, state="ready", size_bytes=info.size_bytes))
            ops.end(txn, d)

    async def undo_create(self, d: dict[str, Any]) -> None:
        ops = self.ops
        with ops.store.read() as txn:
            snap = txn.get("snapshots", d["name"])
        if snap is not None and d.get("uuid") and snap.get("uuid") not in (None, d["uuid"]):
            snap = None  # another snapshot of that name since: not this intent's
        if snap is not None:
            await ops.call("delete_volume", snap["pool_id"], snap["snap_id"])
        with ops.store.write() as txn:
            if snap is not None:
                txn.delete("snapshots", d["name"])
            ops.end(txn, d)

    async def delete(self, d: dict[str, Any]) -> None:
        ops = self.ops
        with ops.store.read() as txn:
            snap = txn.get("snapshots", d["name"])
        if snap is None:
            return ops._drop(d)  # type: ignore[no-any-return]
        await ops.call("delete_volume", snap["pool_id"], snap["snap_id"])
        crash.point("snapshot.delete:snapshot-deleted")
        with ops.store.write() as txn:
            txn.delete("snapshots", d["name"])
            ops.end(txn, d)
