"""Durable operations of replicated volumes (each step idempotent; see nodeos/node/ops.py).

volume.replica (a secondary): export the replica LV to the primary's initiator, make the
  linear view (or, without views, the data plane's stand-in), export the front end from it (ANA
  inaccessible) -> record ready.
The steps follow the data plane's MirrorCaps (data offset, views, write freeze), never its name.
volume.mirror (the primary): attach every secondary's replica namespace, create (first time
  only, on brand-new members) or assemble md raid1 over the local LV and them, export the front
  end from the md device (ANA optimized) -> record ready.
Deleting tears down in the reverse order. A failed step leaves the record "standby" and the
agent tries again on a later pass; a crash is finished at the next start (roll forward).

Failover (the map moved `primary` and bumped `epoch`; the record already holds the new role):
volume.retarget (a secondary): re-export the replica LV to the new primary only (the old one's
  controllers are dropped).
volume.promote (the new primary): unexport my replica (drops the old primary's controllers),
  point the view at `error` (frees my LV), attach the up in-sync replicas, assemble md (never
  create), view -> md at offset 0 (the front end keeps its namespace), ANA optimized.
volume.demote (the old primary): ANA inaccessible first with the hosts' controllers dropped,
  then, while a guard drops every leg that blocks (node/demote_guard.py), front end onto the
  view, view -> `error`, stop md; detach the replicas, wipe my leg's superblock (it may hold
  writes the others never got: it comes back by a full copy), export it as the new primary's
  replica, view -> LV.
Without views (SPDK: nvmf claims a bdev for one subsystem) the front end's namespace itself
  moves, between the stand-in and the mirror, keeping its NQN, UUID and NGUID (hosts keep the
  path and get an ANA change; ../shared/replication/spdk-raid1.md, "host continuity"): promote
  moves it onto the mirror, then deletes the stand-in; demote makes the stand-in, moves it
  there, then stops the mirror, having dropped every leg first (no superblock: nothing to
  protect on them, nothing left to block).
volume.rejoin (the primary): attach replicas that came back and re-add their legs; a replica
  new to the placement (re-placed onto another node) is added in full (its LV carries no md
  superblock); the legs of replicas re-placed away (`gone`) leave md, then their remotes go.
A role change that fails keeps its intent: it is retried (periodic recovery) until it is done.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import MirrorCaps
from nodeos.errors import NodeosError, OperationFailed

from . import crash, replicas
from .demote_guard import LegGuard

LOG = logging.getLogger("nodeosd.node")


class MirrorOps:
    def __init__(self, ops: Any) -> None:
        self.ops = ops

    @property
    def caps(self) -> MirrorCaps:
        """What the data plane's mirrors can do: the steps below follow it, never the backend's name."""
        return self.ops.dp.mirror_caps  # type: ignore[no-any-return]

    async def _secondary_front(self, vol: dict[str, Any]) -> str:
        """The device of a secondary's front end: a view of its LV at the data offset, or the data
        plane's stand-in when it has no views (the replica export holds the LV). Its size lags the
        volume's while a grow waits for the primary (`front_bytes`, see grow)."""
        size = int(vol.get("front_bytes") or vol["size_bytes"])
        if self.caps.views:
            lv = vol["lv_device"]
            return str(
                await self.ops.call(
                    "ensure_view", replicas.view_id(vol), lv, self.caps.data_offset_bytes, size
                )
            )
        return str(await self.ops.call("block_view", replicas.view_id(vol), size))

    def _load(self, name: str) -> dict[str, Any] | None:
        with self.ops.store.read() as txn:
            return txn.get("volumes", name)

    def _finish(self, d: dict[str, Any], vol: dict[str, Any]) -> None:
        with self.ops.store.write() as txn:
            txn.put("volumes", d["name"], dict(vol, state="ready"))
            self.ops.end(txn, d)

    async def replica_export(self, d: dict[str, Any]) -> None:
        """A new secondary's first export of its leg (a new volume's, or a replica re-placed
        onto this node). Its LV may be one left from an earlier replica of the same volume here
        (a drive that came back, an orphan not yet collected: create_volume takes it as it is),
        with that replica's md superblock: the primary's `--re-add` would then take it back by
        the bitmap (md trusts its event count, which says nothing across the copies made since)
        and count a leg that lacks later writes in sync. The superblock goes first: a new leg
        always joins by a full copy. Only before the leg's first export: an export already there
        (this step rerun after a crash) may be a member of the primary's mirror by now."""
        vol = self._load(d["name"])
        if vol is None:
            return self.ops._drop(d)
        if await self.ops.call("export_info", names.replica_nqn(vol["uuid"], str(d["me"]))) is None:
            await self.ops.call("wipe_mirror_member", str(vol["lv_device"]))
        lst = self.ops.listeners()
        await self.ops.call("apply_export", replicas.replica_spec(vol, int(d["me"]), lst))
        crash.point("volume.replica:replica-exported")
        vol = dict(vol, device=await self._secondary_front(vol))
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
            "assemble_mirror", replicas.mirror_spec(vol, members, not vol.get("mirror_created"), self.caps)
        )
        # Recorded at once: from now on the members hold data, never --create over them again.
        vol = dict(vol, mirror_created=True, device=info.device)
        with self.ops.store.write() as txn:
            txn.put("volumes", d["name"], dict(vol, state="standby"))
        crash.point("volume.mirror:mirror-assembled")
        await self.ops.call("apply_export", self.ops.spec_for(vol))
        crash.point("volume.mirror:front-exported")
        self._finish(d, vol)

    async def grow(self, d: dict[str, Any], vol: dict[str, Any]) -> None:
        """volume.resize of a replicated volume (`d["phase"]`, planned in nodeos/agent/grow.py):
        "legs" on a secondary: its LV grows (the replica export's namespace is revalidated with
        it, so the primary's initiator is told); "primary": its LV, then every attached leg seen
        at the new size, then md, then the front end (its view too when it has one), revalidated
        so the hosts see the new size; "front" on a secondary, once the primary has grown: its
        view and front end. A secondary's front end grows last so the hosts' multipath device
        takes its new size from the optimized path, and from "legs" to "front" it withholds its
        namespace (replicas.front_end): a path of another size a host scans last makes it set the
        optimized one aside (Linux clears a path whose size differs from the device's) until
        that path is rescanned. Each step is idempotent: a crash or failure is rolled forward
        or retried."""
        size, phase = int(d["size_bytes"]), d.get("phase", "legs")
        lv_bytes = replicas.lv_size(dict(vol, size_bytes=size), self.caps)
        front = size if phase != "legs" else int(vol.get("front_bytes") or vol["size_bytes"])
        if phase in ("legs", "primary"):
            await self.ops.call("resize_volume", vol["pool_id"], vol["vol_id"], lv_bytes)
            crash.point("volume.resize:volume-resized")
        if phase == "primary":
            attached = {r.nqn for r in await self.ops.call("list_remotes") if r.device}
            for spec in replicas.remote_specs(vol):
                if spec.nqn in attached:
                    await self.ops.call("rescan_remote", spec.nqn, lv_bytes)
            info = await self.ops.call("grow_mirror", names.mirror_id_for(vol["uuid"]), size)
            if vol.get("device") == replicas.view_path(vol):
                await self.ops.call("ensure_view", replicas.view_id(vol), info.device, 0, size)
            self._log(vol, "mirror grown to %d bytes", size)
        elif phase == "front" and self.caps.views:
            await self.ops.call(
                "ensure_view", replicas.view_id(vol), vol["lv_device"], self.caps.data_offset_bytes, size
            )
        if phase in ("legs", "front"):  # the namespace withheld at "legs", back at the new size at "front"
            grown = dict(vol, size_bytes=size, front_bytes=front)
            await self.ops.call("apply_export", self.ops.spec_for(grown))
        if phase in ("primary", "front"):
            await self.ops.call("revalidate_export", vol["nqn"])
            crash.point("volume.resize:export-applied")
        self._finish(d, dict(vol, size_bytes=size, front_bytes=front))

    async def back_to_standby(self, d: dict[str, Any]) -> None:
        with self.ops.store.write() as txn:
            vol = txn.get("volumes", d["name"])
            if vol is not None and vol["state"] != "ready":
                txn.put("volumes", d["name"], dict(vol, state="standby"))
            self.ops.end(txn, d)

    async def back_to_ready(self, d: dict[str, Any]) -> None:
        """A rejoin that failed changed nothing the mirror needs: the next pass tries again."""
        with self.ops.store.write() as txn:
            vol = txn.get("volumes", d["name"])
            if vol is not None:
                txn.put("volumes", d["name"], dict(vol, state="ready"))
            self.ops.end(txn, d)

    async def keep_for_retry(self, d: dict[str, Any]) -> None:
        """A role change is never undone: its intent stays and recovery finishes it later."""
        raise OperationFailed(f"{d['op']} of {d.get('name')} is retried by recovery")

    def _log(self, vol: dict[str, Any], what: str, *args: Any) -> None:
        LOG.info("volume %s epoch %s: " + what, vol["name"], vol.get("epoch"), *args)

    def _save(self, name: str, vol: dict[str, Any]) -> None:
        with self.ops.store.write() as txn:
            txn.put("volumes", name, vol)

    async def retarget(self, d: dict[str, Any]) -> None:
        vol = self._load(d["name"])
        if vol is None:
            return self.ops._drop(d)
        spec = replicas.replica_spec(vol, int(vol["me"]), self.ops.listeners())
        await self.ops.call("apply_export", spec)
        self._log(vol, "replica exported to %s only", vol["primary_host_nqn"])
        crash.point("volume.retarget:replica-exported")
        self._finish(d, vol)

    async def _attach(self, vol: dict[str, Any], nids: list[int]) -> list[str]:
        """The devices of the remotes in `nids` (slot order); one that cannot be attached is
        left out (the mirror runs without it; a rejoin brings it back)."""
        want = {int(n) for n in nids}
        have = {r.nqn: r.device for r in await self.ops.call("list_remotes") if r.device}
        out = []
        for r, spec in zip(vol.get("remotes") or [], replicas.remote_specs(vol), strict=True):
            if int(r["node"]) not in want:
                if have.get(spec.nqn):
                    out.append(str(have[spec.nqn]))  # attached already: the leg stays in
                continue
            try:
                out.append(str(await self.ops.call("attach_remote", spec)))
                self._log(vol, "replica of node %s attached", r["node"])
            except NodeosError as err:
                LOG.warning("volume %s: replica of node %s not attached: %s", vol["name"], r["node"], err)
        return out

    async def promote(self, d: dict[str, Any]) -> None:
        vol = self._load(d["name"])
        if vol is None:
            return self.ops._drop(d)
        mid = names.mirror_id_for(vol["uuid"])
        size = int(vol["size_bytes"])
        self._log(vol, "promoting to primary")
        await self.ops.call("remove_export", names.replica_nqn(vol["uuid"], str(vol["me"])))
        crash.point("volume.promote:replica-unexported")
        if self.caps.views and await self.ops.call("mirror_status", mid) is None:
            # md needs the LV exclusively; the view (and the front end on it) stays.
            await self.ops.call("block_view", replicas.view_id(vol), size)
        members = [str(vol["lv_device"]), *await self._attach(vol, list(d.get("attach") or []))]
        info = await self.ops.call("assemble_mirror", replicas.mirror_spec(vol, members, False, self.caps))
        self._log(vol, "mirror assembled over %d leg(s)", len(members))
        crash.point("volume.promote:mirror-assembled")
        if self.caps.views:
            front = await self.ops.call("ensure_view", replicas.view_id(vol), info.device, 0, size)
        else:
            front = info.device  # the namespace moves from the stand-in onto the mirror
        vol = dict(vol, device=front, mirror_created=True)
        self._save(d["name"], vol)
        await self.ops.call("apply_export", self.ops.spec_for(vol))
        if not self.caps.views:
            await self.ops.call("remove_view", replicas.view_id(vol))  # the stand-in, exported no more
        self._log(vol, "front end optimized")
        crash.point("volume.promote:front-exported")
        self._finish(d, vol)

    async def demote(self, d: dict[str, Any]) -> None:
        vol = self._load(d["name"])
        if vol is None:
            return self.ops._drop(d)
        mid = names.mirror_id_for(vol["uuid"])
        size = int(vol["size_bytes"])
        self._log(vol, "demoting to secondary")
        info = await self.ops.call("mirror_status", mid)
        if info is not None:
            # Fenced first, the hosts' controllers dropped every time: from here no host write
            # reaches md and none md holds can be acknowledged (False: no front end, no host).
            await self.ops.call("fence_export", vol["nqn"], True)
            self._log(vol, "front end inaccessible, its hosts' controllers dropped")
            crash.point("volume.demote:front-fenced")
            # Replicas that moved on dropped (or drop, meanwhile) my controllers: md's I/O waits on
            # those legs for ever (no fast-fail), and every step below waits for md's I/O. The
            # guard drops such legs off the queue until md is stopped (node/demote_guard.py).
            async with LegGuard(self.ops.dp, vol, hosts_cut=True, live_too=not self.caps.superblock):
                await self.ops.call("apply_export", self.ops.spec_for(vol))  # the record says secondary
                vol = await self._front_off_mirror(d["name"], vol, info.device, size)
                await self.ops.call("stop_mirror", mid)
            self._log(vol, "mirror stopped")
        else:
            await self.ops.call("stop_mirror", mid)  # an inactive leftover would hold the LV
        crash.point("volume.demote:mirror-stopped")
        for spec in replicas.remote_specs(vol):
            await self.ops.call("detach_remote", spec.nqn)
        await self._detach_gone(vol)
        await self.ops.call("wipe_mirror_member", str(vol["lv_device"]))
        self._log(vol, "own leg wiped: it rejoins by a full copy from the new primary")
        crash.point("volume.demote:leg-wiped")
        await self.ops.call("apply_export", replicas.replica_spec(vol, int(vol["me"]), self.ops.listeners()))
        crash.point("volume.demote:replica-exported")
        view = await self._secondary_front(vol)
        vol = {k: v for k, v in vol.items() if k not in ("remotes", "host_nqn")}
        vol = dict(vol, device=view)
        await self.ops.call("apply_export", self.ops.spec_for(vol))
        self._log(vol, "secondary of %s", vol["primary_host_nqn"])
        self._finish(d, vol)

    async def _front_off_mirror(
        self, name: str, vol: dict[str, Any], mirror_device: str, size: int
    ) -> dict[str, Any]:
        """A demote's front end off the mirror, so the mirror can stop: onto the view (pointed at
        the mirror first, then at `error`), or, without views, its namespace moved onto the
        stand-in. Returns the record as exported."""
        if self.caps.views:
            view = replicas.view_path(vol)
            if vol.get("device") != view:
                await self.ops.call("ensure_view", replicas.view_id(vol), mirror_device, 0, size)
        else:
            view = await self.ops.call("block_view", replicas.view_id(vol), size)
        if vol.get("device") != view:
            vol = dict(vol, device=view)
            self._save(name, vol)
            await self.ops.call("apply_export", self.ops.spec_for(vol))
        if self.caps.views:
            await self.ops.call("block_view", replicas.view_id(vol), size)
        return vol

    async def rejoin(self, d: dict[str, Any]) -> None:
        vol = self._load(d["name"])
        if vol is None:
            return self.ops._drop(d)
        # Legs of replicas re-placed away may block (their node is gone): md cannot remove a leg
        # with I/O pending, so they are dropped first. The others are the leg watch's to judge.
        await self.unblock(vol, {int(n) for n in vol.get("gone") or []})
        members = [str(vol["lv_device"]), *await self._attach(vol, list(d.get("attach") or []))]
        crash.point("volume.rejoin:remotes-attached")
        info = await self.ops.call("assemble_mirror", replicas.mirror_spec(vol, members, False, self.caps))
        self._log(vol, "legs reconciled: %s", ", ".join(f"{m.device}={m.state}" for m in info.members))
        # Replicas re-placed elsewhere: md dropped their legs (not in the spec), now their remotes.
        await self._detach_gone(vol)
        vol = await self._front_on_mirror(vol, info.device)
        self._finish(d, {k: v for k, v in vol.items() if k != "gone"})

    async def unblock(
        self, vol: dict[str, Any], nodes: set[int] | None = None, live_too: bool = False
    ) -> list[str]:
        """Drop the legs (of `nodes`, default all) whose controller is not live (`live_too`: every
        attached leg): their I/O blocks (no fast-fail, no ctrl loss), so stopping md, swapping the
        view's table or removing the leg would wait for ever. Only where the map no longer needs
        them in sync (a delete, a replica re-placed away; a demote has its own guard,
        node/demote_guard.py). Returns the NQNs dropped."""
        mid = names.mirror_id_for(vol["uuid"])
        state = {r.nqn: r.state for r in await self.ops.call("list_remotes")}
        want = {int(r["node"]) for r in vol.get("remotes") or []} if nodes is None else nodes
        want |= {int(n) for n in vol.get("gone") or []} if nodes is None else set()
        legs = {}
        for nid in sorted(want):
            nqn = names.replica_nqn(vol["uuid"], str(nid))
            if nqn in state and (state[nqn] != "live" or live_too):
                legs[nqn] = nid
        if not legs:
            return []
        # All in one round, each leg's loss bounded first: none waits behind another (issue 25).
        out = list(await self.ops.call("cut_mirror_legs", mid, list(legs)))
        for nqn in out:
            self._log(vol, "leg of node %s dropped (its controller: %s)", legs[nqn], state[nqn])
        return out

    async def _detach_gone(self, vol: dict[str, Any]) -> None:
        for nid in vol.get("gone") or []:
            await self.ops.call("detach_remote", names.replica_nqn(vol["uuid"], str(nid)))
            self._log(vol, "replica of node %s detached (re-placed elsewhere)", nid)

    async def _front_on_mirror(self, vol: dict[str, Any], md_device: str) -> dict[str, Any]:
        """The primary's front end on its (re)assembled md: through the view when it has one,
        else on md itself (its kernel name may have changed). Returns the record as exported."""
        if vol.get("device") == replicas.view_path(vol):
            await self.ops.call("ensure_view", replicas.view_id(vol), md_device, 0, int(vol["size_bytes"]))
        else:
            vol = dict(vol, device=md_device)
        await self.ops.call("apply_export", self.ops.spec_for(vol))
        return vol

    async def restore(self, vol: dict[str, Any], current: bool = True) -> bool:
        """After a restart (configfs and dm forget): a ready replica's objects again. A secondary:
        replica export, view, front end. A primary only when its md runs (else the agent's rejoin
        assembles it). `current` False: the map moved past this record's epoch; the agent's
        retarget/demote does it (no export to a primary that is no more). False: nothing done."""
        if not current and vol.get("role") == "primary":
            return False
        if vol.get("role") == "secondary":
            if current:
                spec = replicas.replica_spec(vol, int(vol["me"]), self.ops.listeners())
                await self.ops.call("apply_export", spec)
            vol = dict(vol, device=await self._secondary_front(vol))
            await self.ops.call("apply_export", self.ops.spec_for(vol))
            return True
        info = await self.ops.call("mirror_status", names.mirror_id_for(vol["uuid"]))
        if info is None:
            return False
        await self._front_on_mirror(vol, info.device)
        return True

    async def teardown(self, vol: dict[str, Any]) -> None:
        """Everything a replicated volume made besides its LV and front end (already removed)."""
        if vol.get("role") == "primary":
            # The volume goes, so no leg's data matters, and its secondaries delete their replicas
            # at the same time: a live leg may block at any moment (the CI lab saw md's stop wait
            # for ever on a leg whose replica went meanwhile). Every attached leg is dropped first.
            await self.unblock(vol, live_too=True)
            # A promoted primary's view maps md: it goes first, or md cannot stop.
            await self.ops.call("remove_view", replicas.view_id(vol))
            await self.ops.call("stop_mirror", names.mirror_id_for(vol["uuid"]))
            for spec in replicas.remote_specs(vol):
                await self.ops.call("detach_remote", spec.nqn)
        else:
            await self.ops.call("remove_view", replicas.view_id(vol))
            me = vol.get("me")
            if me is not None:
                await self.ops.call("remove_export", names.replica_nqn(vol["uuid"], str(me)))

    def mirror_members(
        self, info: Any, vol: dict[str, Any], remotes: list[Any] | None = None, down: Iterable[int] = ()
    ) -> tuple[dict[int, str], dict[int, float]]:
        """The primary's view of each secondary's leg, as replica states of the map, and the
        rebuild progress (0..1) of the legs being synced. A leg is found by its attached
        device (`remotes`: list_remotes()), else by its placement slot; `down`: nodes whose
        leg's controller has not been live for too long (nodeos/agent/legs.py): failed."""
        return leg_states(info, vol, remotes, down)


def leg_states(
    info: Any, vol: dict[str, Any], remotes: list[Any] | None = None, down: Iterable[int] = ()
) -> tuple[dict[int, str], dict[int, float]]:
    """Pure: MirrorInfo + record (+ the attached remotes, + the nodes whose leg is down: its I/O
    blocks) -> ({node: state}, {node: progress})."""
    by_slot = {m.slot: m for m in info.members if m.slot is not None}
    by_dev = {os.path.basename(m.device): m for m in info.members if m.device}
    dev_of = {r.nqn: os.path.basename(r.device) for r in remotes or [] if r.device}
    downs = {int(n) for n in down}
    states: dict[int, str] = {}
    progress: dict[int, float] = {}
    for i, r in enumerate(vol.get("remotes") or [], start=1):
        nid = int(r["node"])
        if remotes is not None:
            dev = dev_of.get(names.replica_nqn(vol["uuid"], str(nid)))
            m = by_dev.get(dev) if dev else None
        else:
            m = by_slot.get(int(r.get("slot", i)))
        state = m.state if m is not None else "missing"
        states[nid] = {"in_sync": "in-sync", "rebuilding": "syncing", "spare": "syncing"}.get(state, "failed")
        if nid in downs:
            states[nid] = "failed"
        if m is not None and states[nid] == "syncing":
            progress[nid] = float(m.progress or 0.0)
    return states, progress
