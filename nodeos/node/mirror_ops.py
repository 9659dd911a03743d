"""Durable operations of replicated volumes (each step idempotent; see nodeos/node/ops.py).

volume.replica (a secondary): export the replica LV to the primary's initiator, make the
  linear view, export the front end from it (ANA inaccessible) -> record ready.
volume.mirror (the primary): attach every secondary's replica namespace, create (first time
  only, on brand-new members) or assemble md raid1 over the local LV and them, export the front
  end from the md device (ANA optimized) -> record ready.
Deleting tears down in the reverse order. A failed step leaves the record "standby" and the
agent tries again on a later pass; a crash is finished at the next start (roll forward).
"""

from __future__ import annotations

from typing import Any

from nodeos.dataplane import mirror_names as names

from . import crash, replicas


class MirrorOps:
    def __init__(self, ops: Any) -> None:
        self.ops = ops

    def _load(self, name: str) -> dict[str, Any] | None:
        with self.ops.store.read() as txn:
            return txn.get("volumes", name)

    def _finish(self, d: dict[str, Any], vol: dict[str, Any]) -> None:
        with self.ops.store.write() as txn:
            txn.put("volumes", d["name"], dict(vol, state="ready"))
            self.ops.end(txn, d)

    async def replica_export(self, d: dict[str, Any]) -> None:
        vol = self._load(d["name"])
        if vol is None:
            return self.ops._drop(d)
        lst = self.ops.listeners()
        await self.ops.call("apply_export", replicas.replica_spec(vol, int(d["me"]), lst))
        crash.point("volume.replica:replica-exported")
        view = await self.ops.call(
            "ensure_view",
            replicas.view_id(vol),
            vol["lv_device"],
            names.MIRROR_DATA_OFFSET,
            int(vol["size_bytes"]),
        )
        vol = dict(vol, device=view)
        await self.ops.call("apply_export", self.ops.spec_for(vol))
        crash.point("volume.replica:front-exported")
        self._finish(d, vol)

    async def assemble(self, d: dict[str, Any]) -> None:
        vol = self._load(d["name"])
        if vol is None:
            return self.ops._drop(d)
        members = [str(vol["lv_device"])]
        for spec in replicas.remote_specs(vol):
            members.append(str(await self.ops.call("attach_remote", spec)))
        crash.point("volume.mirror:remotes-attached")
        info = await self.ops.call(
            "assemble_mirror", replicas.mirror_spec(vol, members, not vol.get("mirror_created"))
        )
        # Recorded at once: from now on the members hold data, never --create over them again.
        vol = dict(vol, mirror_created=True, device=info.device)
        with self.ops.store.write() as txn:
            txn.put("volumes", d["name"], dict(vol, state="standby"))
        crash.point("volume.mirror:mirror-assembled")
        await self.ops.call("apply_export", self.ops.spec_for(vol))
        crash.point("volume.mirror:front-exported")
        self._finish(d, vol)

    async def back_to_standby(self, d: dict[str, Any]) -> None:
        with self.ops.store.write() as txn:
            vol = txn.get("volumes", d["name"])
            if vol is not None and vol["state"] != "ready":
                txn.put("volumes", d["name"], dict(vol, state="standby"))
            self.ops.end(txn, d)

    async def teardown(self, vol: dict[str, Any]) -> None:
        """Everything a replicated volume made besides its LV and front end (already removed)."""
        if vol.get("role") == "primary":
            await self.ops.call("stop_mirror", names.mirror_id_for(vol["uuid"]))
            for spec in replicas.remote_specs(vol):
                await self.ops.call("detach_remote", spec.nqn)
        else:
            await self.ops.call("remove_view", replicas.view_id(vol))
            me = vol.get("me")
            if me is not None:
                await self.ops.call("remove_export", names.replica_nqn(vol["uuid"], str(me)))

    def mirror_members(self, info: Any, vol: dict[str, Any]) -> dict[int, str]:
        """The primary's view of each secondary's leg, as replica states of the map."""
        by_slot = {m.slot: m for m in info.members if m.slot is not None}
        out: dict[int, str] = {}
        for slot, r in enumerate(vol.get("remotes") or [], start=1):
            m = by_slot.get(slot)
            state = m.state if m is not None else "missing"
            out[int(r["node"])] = {
                "in_sync": "in-sync",
                "rebuilding": "syncing",
                "spare": "syncing",
            }.get(state, "failed")
        return out
