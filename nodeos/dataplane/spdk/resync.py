"""Partial resync of a returning mirror leg on the SPDK data plane (issue 29), the edge.

The plan and why it is sound: spdk/resync_plan.py; the choice and the figures: docs/dataplane.md,
docs/benchmarks.md. Three moments:
- `_track_cut`: a live leg is cut (a released node's): freeze, check the leg in sync, snapshot
  the local lvol (`@trk.<leg>`), cut, thaw. A blocked leg is cut without tracking (full copy).
- `_partial_join`: the leg is back and the mirror idle: shallow-copy every snapshot between the
  tracking one and the live lvol onto it, in rounds while hosts write, the last under a freeze
  where the raid is made again with the leg in it (no rebuild) and the namespace moved onto it.
- `_clean_tracking`: tracking and step snapshots of legs in sync again (or orphaned steps) go.
Every state a crash can leave is either used again (the snapshots stay on the lvol's chain and
are copied again) or deleted, which only ever means a full copy later.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from nodeos.dataplane.base import MirrorInfo, MirrorSpec
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk import resync_plan as rp
from nodeos.dataplane.spdk.mirror_plan import hold_name
from nodeos.dataplane.spdk.requests import (
    Request,
    add_ns,
    get_bdevs,
    get_lvstores,
    lvol_delete,
    lvol_snapshot,
    null_create,
    null_delete,
    raid1_create,
    raid_delete,
    raid_remove_base,
    remove_ns,
)
from nodeos.errors import NodeosError, OperationFailed

LOG = logging.getLogger("nodeosd.dataplane")
COPY_POLL_S = 0.05


@dataclass
class ResyncStat:
    """The last resync of a leg: partial or full, bytes the shallow copies wrote, seconds."""

    leg: str
    partial: bool
    why: str
    bytes_copied: int = 0
    seconds: float = 0.0
    rounds: int = 0


def shallow_copy(src_alias: str, dst_bdev: str) -> Request:
    return "bdev_lvol_start_shallow_copy", {"src_lvol_name": src_alias, "dst_bdev_name": dst_bdev}


def check_shallow_copy(op_id: int) -> Request:
    return "bdev_lvol_check_shallow_copy", {"operation_id": op_id}


class SpdkResync:
    """The resync half of SpdkMirrors (which provides call(), _maybe(), _bdev_named(),
    mirror_status(), the freeze and _front_end())."""

    partial_resync = True  # False: every returning leg by a full copy, as before issue 29
    resync_stats: dict[str, ResyncStat]

    def call(self, req: Request, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def _maybe(self, req: Request) -> Any:
        raise NotImplementedError

    def _bdev_named(self, name: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _front_end(self, mirror_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def mirror_status(self, mirror_id: str) -> MirrorInfo | None:
        raise NotImplementedError

    def prepare_mirror_freeze(self, mirror_id: str) -> None:
        raise NotImplementedError

    def freeze_mirror_writes(self, mirror_id: str) -> None:
        raise NotImplementedError

    def thaw_mirror_writes(self, mirror_id: str) -> None:
        raise NotImplementedError

    def mirror_writes_frozen(self, mirror_id: str) -> bool:
        raise NotImplementedError

    # ---- reading ---------------------------------------------------------------------
    def _head(self, member: str) -> tuple[str, str] | None:
        """(lvstore, lvol name) of a mirror's local member, when it is an lvol."""
        b = self._bdev_named(member)
        alias = parse.lvol_alias(b) if b is not None and parse.bdev_lvol(b) is not None else None
        if not alias:
            return None
        lvs, _, name = alias.partition("/")
        return lvs, name

    def _lvols(self, lvs: str) -> dict[str, rp.Lvol]:
        out = {}
        for b in self.call(get_bdevs()) or []:
            a = parse.lvol_alias(b)
            if a and a.partition("/")[0] == lvs and (lv := rp.lvol_of(b)) is not None:
                out[lv.name] = lv
        return out

    def _cluster_bytes(self, lvs: str) -> int:
        for s in self.call(get_lvstores(lvs)) or []:
            return int(s.get("cluster_size") or 0)
        return 0

    def _local_member(self, info: MirrorInfo) -> str | None:
        """The mirror's member that is an lvol of this node (the primary's own leg)."""
        for m in info.members:
            if m.device and m.state == "in_sync" and self._head(m.device) is not None:
                return m.device
        return None

    # ---- the cut ---------------------------------------------------------------------
    def _track_cut(self, mirror_id: str, leg: str) -> bool:
        """Before a live leg is cut: under a freeze, and only when the leg is in sync, the
        tracking snapshot. True when taken (or already there). The caller cuts, then thaws
        (`_end_cut`). A failure leaves no tracking (a full copy later), never a wrong one."""
        info = self.mirror_status(mirror_id)
        local = self._local_member(info) if info is not None else None
        if not self.partial_resync or info is None or local is None:
            return False
        head = self._head(local)
        assert head is not None
        name = rp.track_name(leg)
        try:
            self.freeze_mirror_writes(mirror_id)  # every acknowledged write is on every in-sync leg
        except NodeosError as e:
            LOG.warning("mirror %s: no tracking of leg %s (freeze refused: %s)", mirror_id, leg, e)
            return False
        info = self.mirror_status(mirror_id)
        if info is None or not any(m.device == leg and m.state == "in_sync" for m in info.members):
            return False  # a leg not in sync lacks writes from before: it comes back in full
        if name in self._lvols(head[0]):
            return True  # an older tracking snapshot: it marks more, never less
        try:
            self.call(lvol_snapshot(f"{head[0]}/{head[1]}", name))
        except NodeosError as e:
            LOG.warning("mirror %s: no tracking of leg %s (snapshot failed: %s)", mirror_id, leg, e)
            return False
        LOG.info("mirror %s: leg %s cut with tracking (%s)", mirror_id, leg, name)
        return True

    def _end_cut(self, mirror_id: str, was_frozen: bool) -> None:
        if not was_frozen:
            self.thaw_mirror_writes(mirror_id)

    # ---- the join --------------------------------------------------------------------
    def _copy(self, lvs: str, snap: str, leg: str) -> int:
        """Shallow-copy one snapshot onto the leg; the bytes written."""
        op = self.call(shallow_copy(f"{lvs}/{snap}", leg))
        op_id = int(op["operation_id"] if isinstance(op, dict) else op)
        while True:
            st = self.call(check_shallow_copy(op_id)) or {}
            state = str(st.get("state") or "")
            if state == "complete":
                return int(st.get("copied_clusters") or 0)
            if state != "in progress":
                raise OperationFailed(f"shallow copy of {snap} onto {leg} failed: {st.get('error', st)}")
            time.sleep(COPY_POLL_S)

    def _partial_join(self, spec: MirrorSpec, info: MirrorInfo, leg: str) -> bool:
        """Join `leg` by copying only what it missed; False: nothing done, a full copy it is."""
        if not self.partial_resync:
            return False
        local = self._local_member(info)
        head = self._head(local) if local else None
        b = self._bdev_named(leg)
        if head is None or b is None:
            return False
        lvs, name = head
        cluster = self._cluster_bytes(lvs)
        lvols = self._lvols(lvs)
        first = rp.plan(lvols, name, leg, spec.size_bytes, parse.bdev_size(b), cluster)
        stat = ResyncStat(leg, first.partial, first.why)
        self.resync_stats[spec.mirror_id] = stat
        if not first.partial:
            LOG.warning("mirror %s: leg %s comes back by a full copy: %s", spec.mirror_id, leg, first.why)
            self._drop_tracking(lvs, lvols, leg)
            return False
        t0 = time.monotonic()
        copied: list[str] = []
        frozen_before = self.mirror_writes_frozen(spec.mirror_id)
        last = first.bytes_estimate
        for round_no in range(1, rp.MAX_ROUNDS + 2):
            final = rp.go_final(round_no, last)
            if final:
                self.freeze_mirror_writes(spec.mirror_id)
            try:
                self.call(lvol_snapshot(f"{lvs}/{name}", rp.step_name(leg, rp.next_step(lvols, leg))))
                lvols = self._lvols(lvs)
                p = rp.plan(lvols, name, leg, spec.size_bytes, parse.bdev_size(b), cluster, copied)
                if not p.partial:  # the chain changed under us (a user deleted a snapshot?)
                    raise OperationFailed(f"tracking lost during the resync: {p.why}")
                last = 0
                for snap in p.copies:
                    last += self._copy(lvs, snap, leg) * cluster
                    copied.append(snap)
                stat.bytes_copied += last
                stat.rounds = round_no
                if final:
                    self._rebuild_raid_with(spec.mirror_id, leg)
            finally:
                if final and not frozen_before:
                    self.thaw_mirror_writes(spec.mirror_id)
            if final:
                break
        stat.seconds = time.monotonic() - t0
        LOG.info(
            "mirror %s: leg %s resynced partially: %d bytes in %d round(s), %.2f s (volume %d bytes)",
            spec.mirror_id,
            leg,
            stat.bytes_copied,
            stat.rounds,
            stat.seconds,
            spec.size_bytes,
        )
        self._clean_tracking(spec.mirror_id)
        return True

    def _rebuild_raid_with(self, mirror_id: str, leg: str) -> None:
        """Under a freeze: the raid made again over its members plus `leg`, no rebuild (a created
        raid1 does no initial sync), the front end's namespace moved onto it (same nsid, UUID,
        NGUID and group: a frozen namespace stays frozen)."""
        info = self.mirror_status(mirror_id)
        if info is None:
            raise OperationFailed(f"mirror {mirror_id} went away during the resync of {leg}")
        slots: list[str | None] = [m.device if m.state == "in_sync" else None for m in info.members]
        old = list(slots)
        slots[slots.index(None)] = leg
        sub = self._front_end(mirror_id)
        ns = parse.subsystem_ns1(sub) if sub is not None else None
        if sub is not None and ns is not None:
            self.call(remove_ns(str(sub["nqn"]), 1))
        try:
            self.call(raid_delete(mirror_id))
            try:
                self._raid_over(mirror_id, slots, info.size_bytes)
            except NodeosError:
                self._raid_over(mirror_id, old, info.size_bytes)  # as it was; the leg by a full copy
                raise
        finally:
            if sub is not None and ns is not None:
                self.call(
                    add_ns(
                        str(sub["nqn"]),
                        mirror_id,
                        1,
                        uuid=ns.get("uuid"),
                        nguid=ns.get("nguid"),
                        anagrpid=int(ns.get("anagrpid") or 1),
                    )
                )

    def _raid_over(self, mirror_id: str, slots: list[str | None], size_bytes: int) -> None:
        holds = [hold_name(mirror_id, i) for i, d in enumerate(slots) if d is None]
        it = iter(holds)
        members = [d if d is not None else next(it) for d in slots]
        try:
            for h in holds:
                self.call(null_create(h, size_bytes // 4096, 4096))
            self.call(raid1_create(mirror_id, members))
            deadline = time.monotonic() + 10
            while self.mirror_status(mirror_id) is None:
                if time.monotonic() > deadline:
                    raise OperationFailed(f"mirror {mirror_id} did not come online")
                time.sleep(0.05)
            for h in holds:
                self.call(raid_remove_base(h))
        finally:
            for h in holds:
                self._maybe(null_delete(h))

    # ---- cleaning --------------------------------------------------------------------
    def _delete_all(self, lvs: str, names: list[str]) -> None:
        for n in names:
            with contextlib.suppress(NodeosError):
                self.call(lvol_delete(f"{lvs}/{n}"))

    def _wipe_tracking(self, member: str) -> None:
        """Every tracking and step snapshot under lvol `member` (a demoted primary's own leg)."""
        head = self._head(member)
        if head is not None:
            lvols = self._lvols(head[0])
            self._delete_all(head[0], [n for n in rp.chain(lvols, head[1]) if rp.is_internal(n)])

    def _forget_leg(self, leg: str) -> None:
        """A leg whose replica left the placement: its tracking goes, in whichever lvstore."""
        for b in self.call(get_bdevs()) or []:
            lvs, _, n = (parse.lvol_alias(b) or "").partition("/")
            if n == rp.track_name(leg) or rp.step_index(n, leg) is not None:
                with contextlib.suppress(NodeosError):
                    self.call(lvol_delete(f"{lvs}/{n}"))

    def _drop_tracking(self, lvs: str, lvols: dict[str, rp.Lvol], leg: str) -> None:
        for n in [rp.track_name(leg), *rp.steps_of(lvols, leg)]:
            if n in lvols:
                self._maybe(lvol_delete(f"{lvs}/{n}"))

    def _clean_tracking(self, mirror_id: str) -> None:
        """Delete what no leg needs any more (resync_plan.leftovers); best effort."""
        info = self.mirror_status(mirror_id)
        local = self._local_member(info) if info is not None else None
        head = self._head(local) if local else None
        if info is None or head is None:
            return
        lvols = self._lvols(head[0])
        legs = [m.device for m in info.members if m.device and m.state == "in_sync" and m.device != local]
        under = set(rp.chain(lvols, head[1]))
        for n in rp.leftovers(lvols, legs):
            if n in under:
                with contextlib.suppress(NodeosError):
                    self.call(lvol_delete(f"{head[0]}/{n}"))
