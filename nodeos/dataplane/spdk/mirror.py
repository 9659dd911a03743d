"""Mirrors over the fabric on the SPDK data plane (issue 8): raid1 bdevs over the local lvol and
replica namespaces attached with bdev_nvme.

What differs from md (kernel/mirror.py), per ../shared/replication/spdk-raid1.md:
- No superblock (`superblock: false`): nothing about the mirror is written on its members, so
  the control plane alone keeps members, order and offsets, a replica node never auto-claims its
  lvol (raid examine), a mirror can always be started again without its dead members, and data
  starts at offset 0 on every member however it is seen (local lvol or over NVMe-oF), so
  `MirrorSpec.data_offset_bytes` must be 0 and members are exactly the volume's size.
- No write-intent bitmap: a leg that comes back is rebuilt by a full copy, unless it was cut
  live (a rolling upgrade's release) and tracked by an lvol snapshot: then only the clusters
  written since are copied and the raid is made again with it (spdk/resync.py, issue 29). An
  assembled (not created) mirror starts on `members[0]` alone and copies it onto every other member: without a
  superblock nothing tells a stale leg from a current one, so the control plane names the leg
  that is current first. SPDK runs one rebuild per mirror at a time: the members it could not add
  yet stay `missing` until the next `assemble_mirror`.
- A failed leg leaves its slot at once (no `faulty` state): it shows as `missing`.
- Write freeze at the front end (spdk/freeze.py): no RPC holds a bdev's writes, but the primary's
  raid is written only through its front-end subsystem, whose namespace is moved into an ANA
  group that is inaccessible everywhere (SPDK drains its outstanding I/O for the move).
- No linear views (nvmf claims a bdev for one subsystem): ensure_view is refused; a secondary's
  lvol is its replica export's, and its ANA inaccessible front end is a null stand-in (block_view).
Here `SpdkMirrors`, the edge, extended by the backend; the pure parts (names, checks, request
builders, parsers): spdk/mirror_plan.py.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

from nodeos.dataplane.base import MirrorInfo, MirrorSpec, RemoteInfo, RemoteSpec
from nodeos.dataplane.ids import normalize_nguid
from nodeos.dataplane.mirror_names import check_mirror_id, check_volume_size
from nodeos.dataplane.no_mirrors import NoMirrors
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk.freeze import SpdkFreeze
from nodeos.dataplane.spdk.mirror_plan import (
    CTRL_PREFIX,
    SPDK_MIRROR_CAPS,
    STAND_IN_BLOCK,
    check_member,
    check_remote,
    check_spdk_mirror_spec,
    ctrl_name,
    hold_name,
    mirror_info,
    nguid_uuid,
    nvme_attach,
    nvme_subnqn,
    raid_of,
    rebuild_limit_mb,
    remote_infos,
    stand_in_name,
)
from nodeos.dataplane.spdk.requests import (
    Request,
    null_create,
    null_delete,
    nvme_detach,
    nvme_get_controllers,
    raid1_create,
    raid_add_base,
    raid_delete,
    raid_get_bdevs,
    raid_remove_base,
    raid_set_options,
)
from nodeos.dataplane.spdk.resync import SpdkResync
from nodeos.errors import BadInput, EnvironmentProblem, NodeosError, NotFound, NotSupported, OperationFailed


# ---- edge -------------------------------------------------------------------------------
class SpdkMirrors(SpdkFreeze, SpdkResync, NoMirrors):
    """The mirror half of SpdkDataPlane (which provides call(), _maybe() and _subsystem())."""

    mirror_caps = SPDK_MIRROR_CAPS

    def call(self, req: Request, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def _maybe(self, req: Request) -> Any:
        raise NotImplementedError

    def _bdev_named(self, name: str) -> dict[str, Any] | None:
        found = self._maybe(("bdev_get_bdevs", {"name": name}))
        return found[0] if found else None

    def _mirror_bdev(self, name: str) -> dict[str, Any]:
        """The raid bdev of a mirror this node assembled (ExportSpec.device on a primary)."""
        b = self._bdev_named(name)
        if b is None:
            raise NotFound(f"no mirror {name!r} to export (assemble it first)", field="device")
        return b

    # remotes
    def attach_remote(self, spec: RemoteSpec) -> str:
        check_remote(spec)
        name = ctrl_name(spec.nqn)
        if not self._maybe(nvme_get_controllers(name)):
            try:
                self.call(nvme_attach(spec))
            except NodeosError as e:
                raise _attach_error(spec, e) from None
        b = self._bdev_named(nguid_uuid(spec.nguid))
        if b is None or nvme_subnqn(b) != spec.nqn:
            raise NotFound(
                f"{spec.nqn} at {spec.listener.traddr}:{spec.listener.trsvcid} has no namespace with NGUID "
                f"{normalize_nguid(spec.nguid)} (the controller stays attached; detach_remote drops it)",
                field="nguid",
            )
        return str(b["name"])

    def detach_remote(self, nqn: str) -> None:
        name = ctrl_name(nqn)
        if not self._maybe(nvme_get_controllers(name)):
            return
        b = self._bdev_named(name + "n1")
        if b is not None and b.get("claimed"):
            raise OperationFailed(
                f"{nqn} is a member of a mirror ({b['name']}); take it out first", field="nqn"
            )
        self.call(nvme_detach(name))
        self._forget_leg(name + "n1")  # its replica left the placement: never resynced partially

    def list_remotes(self) -> list[RemoteInfo]:
        ctrls = [
            c
            for c in self.call(nvme_get_controllers()) or []
            if str(c.get("name", "")).startswith(CTRL_PREFIX)
        ]
        nguid_of = {}
        for c in ctrls:
            b = self._bdev_named(str(c["name"]) + "n1")
            if b is not None and b.get("uuid"):
                nguid_of[str(b["name"])] = uuidlib.UUID(str(b["uuid"])).hex
        return remote_infos(ctrls, nguid_of)

    def drop_mirror_leg(self, mirror_id: str, nqn: str) -> None:
        """Detach the leg's controller: its bdev goes (queued I/O fails), so the raid takes the
        leg out and completes the held writes on the other legs. A remove_base_bdev first would
        wait for that blocked I/O (it quiesces the raid). A live leg (a released node's) is cut
        under a freeze with a tracking snapshot first: it comes back by a partial resync."""
        check_mirror_id(mirror_id)
        name = ctrl_name(nqn)
        ctrls = self._maybe(nvme_get_controllers(name))
        if not ctrls:
            return
        was_frozen = self.mirror_writes_frozen(mirror_id)
        live = [str(p.get("state")) for c in ctrls for p in c.get("ctrlrs") or []] == ["enabled"]
        if live:
            self._track_cut(mirror_id, name + "n1")
        try:
            self.call(nvme_detach(name))
            deadline = time.monotonic() + 30.0
            while (info := self.mirror_status(mirror_id)) is not None and name + "n1" in {
                m.device for m in info.members
            }:
                if time.monotonic() > deadline:
                    raise OperationFailed(f"mirror {mirror_id} still holds the leg of {nqn}", field="nqn")
                time.sleep(0.1)
        finally:
            if live:
                self._end_cut(mirror_id, was_frozen)

    def cut_mirror_legs(self, mirror_id: str, nqns: Sequence[str]) -> list[str]:
        """Every leg of `nqns` detached first, then waited for together (SPDK's detach does not
        block; the raid drops each leg once its bdev is gone)."""
        check_mirror_id(mirror_id)
        legs = [n for n in dict.fromkeys(nqns) if self._maybe(nvme_get_controllers(ctrl_name(n)))]
        for nqn in legs:
            self.call(nvme_detach(ctrl_name(nqn)))
        gone = {ctrl_name(n) + "n1" for n in legs}
        deadline = time.monotonic() + 30.0
        while (info := self.mirror_status(mirror_id)) is not None and gone & {m.device for m in info.members}:
            if time.monotonic() > deadline:
                raise OperationFailed(
                    f"mirror {mirror_id} still holds legs of {', '.join(legs)}", field="nqn"
                )
            time.sleep(0.1)
        return legs

    def _blocked_legs(self, mirror_id: str) -> list[str]:
        """The mirror's remote legs whose controller is not connected: their writes wait."""
        info = self.mirror_status(mirror_id)
        out = []
        for m in info.members if info is not None else ():
            if m.device and m.device.startswith(CTRL_PREFIX):
                ctrls = self._maybe(nvme_get_controllers(m.device.removesuffix("n1"))) or []
                if [str(p.get("state")) for c in ctrls for p in c.get("ctrlrs") or []] != ["enabled"]:
                    out.append(m.device)
        return out

    # mirrors
    def mirror_status(self, mirror_id: str) -> MirrorInfo | None:
        check_mirror_id(mirror_id)
        b = self._bdev_named(mirror_id)  # registered only while online
        return mirror_info(mirror_id, b) if b is not None and raid_of(b) is not None else None

    def list_mirrors(self) -> list[MirrorInfo]:
        out = []
        for r in self.call(raid_get_bdevs("online")) or []:
            name = str(r.get("name") or "")
            try:
                info = self.mirror_status(name)
            except BadInput:
                continue  # a raid that is not a mirror of ours (a pool's raid0)
            if info is not None:
                out.append(info)
        return out

    def assemble_mirror(self, spec: MirrorSpec) -> MirrorInfo:
        check_spdk_mirror_spec(spec)
        info = self.mirror_status(spec.mirror_id)
        if info is None:
            if any(r.get("name") == spec.mirror_id for r in self.call(raid_get_bdevs("all")) or []):
                self.call(raid_delete(spec.mirror_id))  # a leftover waiting for members: start anew
            info = self._start(spec)
        if info.size_bytes != spec.size_bytes:
            raise OperationFailed(
                f"mirror {spec.mirror_id} is {info.size_bytes} bytes, not {spec.size_bytes}",
                field="size_bytes",
            )
        return self._reconcile(spec, info)

    def _member_bdev(self, spec: MirrorSpec, name: str) -> dict[str, Any] | None:
        b = self._bdev_named(name)
        if b is None:
            return None
        if parse.bdev_size(b) != spec.size_bytes:
            raise OperationFailed(
                f"member {name} is {parse.bdev_size(b)} bytes; a mirror of {spec.size_bytes} bytes needs "
                "members of exactly that size (raid1 spans its smallest member)",
                field="members",
            )
        if b.get("claimed"):
            raise OperationFailed(f"member {name} is in use (exported, or in another raid)", field="members")
        return b

    def _start(self, spec: MirrorSpec) -> MirrorInfo:
        """A new raid: over every member when they are brand new (create), else over members[0]
        with null placeholders in the other slots (at least one: raid1 has two or more), taken
        out at once (a degraded start)."""
        found = {m: self._member_bdev(spec, m) for m in spec.members}
        missing = [m for m, b in found.items() if b is None]
        if spec.create and len(spec.members) > 1:  # raid1 has at least two slots
            if missing:
                raise NotFound(
                    f"cannot create mirror {spec.mirror_id}: {missing[0]} is missing", field="members"
                )
            self.call(raid1_create(spec.mirror_id, list(spec.members)))
            return self._status_now(spec.mirror_id)
        first = found[spec.members[0]]
        if first is None:
            raise NotFound(
                f"mirror {spec.mirror_id} starts from members[0] ({spec.members[0]}), which is missing",
                field="members",
            )
        holds = [hold_name(spec.mirror_id, i) for i in range(1, max(2, len(spec.members)))]
        blocklen = int(first.get("block_size") or 4096)
        try:
            for h in holds:
                if self._bdev_named(h) is None:
                    self.call(null_create(h, spec.size_bytes // blocklen, blocklen))
            self.call(raid1_create(spec.mirror_id, [spec.members[0], *holds]))
            self._status_now(spec.mirror_id)  # online first: a configuring raid would wait for them
            for h in holds:
                self.call(raid_remove_base(h))
        except NodeosError:
            self._maybe(raid_delete(spec.mirror_id))
            raise
        finally:
            for h in holds:
                self._maybe(null_delete(h))
        return self._status_now(spec.mirror_id)

    def _status_now(self, mirror_id: str, timeout_s: float = 10.0) -> MirrorInfo:
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.mirror_status(mirror_id)
            if info is not None:
                return info
            if time.monotonic() > deadline:
                raise OperationFailed(f"mirror {mirror_id} did not come online within {timeout_s:.0f} s")
            time.sleep(0.1)

    def _reconcile(self, spec: MirrorSpec, info: MirrorInfo) -> MirrorInfo:
        for m in info.members:
            if m.device and m.device not in spec.members:
                self.call(raid_remove_base(m.device))  # a leg the placement no longer holds
        info = self._status_now(spec.mirror_id)
        have = {m.device for m in info.members if m.device}
        free = sum(1 for m in info.members if m.device is None)
        for dev in spec.members:
            if dev in have or free == 0 or info.sync_action != "idle":
                continue  # SPDK rebuilds one leg at a time: the next call adds the others
            if self._member_bdev(spec, dev) is None:
                continue  # not attached (yet)
            if not self._partial_join(spec, info, dev):
                self.call(raid_add_base(spec.mirror_id, dev))  # a full copy onto it starts
            info = self._status_now(spec.mirror_id)
            free -= 1
        if not info.degraded:
            self._clean_tracking(spec.mirror_id)
        if free == 0 and any(d not in {m.device for m in info.members} for d in spec.members):
            raise OperationFailed(
                f"mirror {spec.mirror_id} has {len(info.members)} slots, all taken; a new member needs "
                "the mirror stopped and assembled again",
                field="members",
            )
        return info

    def stop_mirror(self, mirror_id: str) -> None:
        check_mirror_id(mirror_id)
        b = self._bdev_named(mirror_id)
        if b is not None and b.get("claimed"):
            raise OperationFailed(
                f"mirror {mirror_id} is exported; remove the export first", field="mirror_id"
            )
        if b is not None or any(r.get("name") == mirror_id for r in self.call(raid_get_bdevs("all")) or []):
            self.call(raid_delete(mirror_id))

    def wipe_mirror_member(self, device: str) -> None:
        """Members carry no superblock; what goes is the tracking an lvol holds for the legs it
        mirrored as a primary (a demoted primary's leg may hold writes the others never got: no
        partial resync may ever start from its snapshots)."""
        check_member(device, "device")
        self._wipe_tracking(device)

    def set_rebuild_limit(self, kib_per_s: int | None) -> None:
        self.call(raid_set_options(rebuild_limit_mb(kib_per_s)))

    def _no_views(self) -> NotSupported:
        return NotSupported(
            "the spdk data plane has no linear views (nvmf claims a bdev for one subsystem only): mirror "
            "data starts at offset 0, and failover role changes, which move a front end between a "
            "replica and its mirror through a view, are not available on it",
            field="view_id",
        )

    def ensure_view(self, view_id: str, device: str, offset_bytes: int, size_bytes: int) -> str:
        raise self._no_views()

    def block_view(self, view_id: str, size_bytes: int) -> str:
        """A stand-in (null bdev `nodeos-view-<id>`) for a secondary's front end: its lvol is
        claimed by the replica export. Exported only ANA inaccessible, where the target itself
        answers every I/O with ANA inaccessible (apply_export refuses it otherwise)."""
        name = stand_in_name(view_id)
        check_volume_size(size_bytes)
        b = self._bdev_named(name)
        if b is not None and parse.bdev_size(b) != size_bytes:
            if b.get("claimed"):
                raise OperationFailed(f"stand-in {name} is exported at another size", field="size_bytes")
            self.call(null_delete(name))
            b = None
        if b is None:
            self.call(null_create(name, size_bytes // STAND_IN_BLOCK, STAND_IN_BLOCK))
        return name

    def remove_view(self, view_id: str) -> None:
        name = stand_in_name(view_id)
        b = self._bdev_named(name)
        if b is not None and b.get("claimed"):
            raise OperationFailed(f"stand-in {name} is exported; remove the export first", field="view_id")
        if b is not None:
            self.call(null_delete(name))


def _attach_error(spec: RemoteSpec, e: NodeosError) -> NodeosError:
    where = f"{spec.nqn} at {spec.listener.trtype} {spec.listener.traddr}:{spec.listener.trsvcid}"
    if ": -95 " in e.message:  # EOPNOTSUPP; its log: "Interrupt mode is only supported with PCIe transport"
        return EnvironmentProblem(
            f"cannot attach {where}: this SPDK target runs in interrupt mode, where bdev_nvme over "
            f"fabrics is refused; a node that holds mirrors runs a polling target ({e.message})",
            field="nqn",
        )
    return OperationFailed(
        f"cannot attach {where} as {spec.host_nqn}: the replica is down, unreachable, or does not admit "
        f"this host ({e.message})",
        field="nqn",
    )
