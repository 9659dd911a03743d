"""SpdkDataPlane: the DataPlane protocol over SPDK's JSON-RPC.

Names: pool P is lvstore `nodeos_P` (over raid0 bdev `nodeos_P_raid0` when it spans
several drives); volume V is lvol `V`, addressed by its alias `nodeos_P/V`. Every query
names its object (bdev_get_bdevs name=, nvmf_get_subsystems nqn=) so work per call does
not grow with the number of volumes (listing 3,000 subsystems takes ~10 s).
Here: RPC errors, transports, drives, pools and volumes; exports: spdk/exports.py; mirrors and
remotes: spdk/mirror.py (the classes this one extends).
"""

from __future__ import annotations

import os
import re
import uuid as uuidlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nodeos.dataplane.base import ExportInfo, Listener, MadeVolume, NewVolume, PoolInfo, VolumeInfo
from nodeos.dataplane.ids import check_id
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.client import SpdkRpc, SpdkRpcError
from nodeos.dataplane.spdk.drives import controller_name
from nodeos.dataplane.spdk.errors import map_error, raid_conflict
from nodeos.dataplane.spdk.exports import UNSENT, SpdkExports
from nodeos.dataplane.spdk.names import LVS_PREFIX, alias, lvs_name
from nodeos.dataplane.spdk.resync import ResyncStat
from nodeos.dataplane.spdk.resync_plan import chain, is_internal
from nodeos.errors import AlreadyExists, BadInput, NodeosError, NotFound, OperationFailed

# SPDK answers a drive's attach once it has examined it, i.e. loaded its lvstore with every lvol:
# 132 s for 10,000 lvols on this machine (an AIO file), far past the client's usual 60 s.
ATTACH_TIMEOUT_S = 900.0
DESCRIBE_TIMEOUT_S = 5.0  # `nodeos status` waits for this answer: a hung target must not hold it
_PCIE = re.compile(r"^pcie:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])$")


class SpdkDataPlane(SpdkExports):
    name = "spdk"

    def __init__(
        self,
        sock_path: str = "/var/tmp/spdk.sock",
        keys_dir: str | Path = "/var/lib/nodeos/spdk-keys",
        discovery_svcid: str | None = "8009",
        transports: tuple[str, ...] = ("tcp", "rdma"),
        timeout: float = 60.0,
    ) -> None:
        self.rpc = SpdkRpc(sock_path, timeout)
        self.keys_dir = Path(keys_dir)
        self.discovery_svcid = discovery_svcid
        self.wanted_transports = transports
        self.transport_errors: dict[str, str] = {}
        # The connection the transports were last checked on: a target reached on a new one may
        # have restarted, empty (its transports gone with it; a re-export's listeners need them).
        self._transports_checked_on: int | None = None
        self.front_ends: dict[str, str] = {}  # mirror id -> its front end's NQN (spdk/freeze.py)
        self._prepared: dict[str, tuple[str, int, int, float]] = {}  # freezes prepared (spdk/freeze.py)
        self._frozen: dict[str, tuple[str, int, int, float]] = {}  # freezes made (spdk/freeze.py)
        self.resync_stats: dict[str, ResyncStat] = {}  # mirror id -> its last leg resync (spdk/resync.py)
        # Each pool's cluster size (an lvstore's never changes): a new lvol's size without a read.
        self._cluster_size: dict[str, int] = {}
        self._discovery_on: tuple[int, set[Listener]] = (-1, set())  # listeners made, per connection

    # ---- RPC with clear errors -----------------------------------------------------------
    @property
    def nvmf_changes(self) -> int:
        return self.rpc.nvmf_changes

    def call(self, req: rq.Request, timeout: float | None = None) -> Any:
        method, params = req
        try:
            return self.rpc.call(method, params, timeout)
        except SpdkRpcError as e:
            raise map_error(e.method, e.params, e.code, e.message) from None

    def _maybe(self, req: rq.Request) -> Any:
        """A lookup: None when SPDK says the object does not exist."""
        try:
            return self.call(req)
        except NotFound:
            return None
        except OperationFailed as e:
            # Several getters answer -32602 "Invalid parameters" for an unknown name.
            if "-32602" in e.message:
                return None
            raise

    def close(self) -> None:
        self.rpc.close()

    def describe(self) -> dict[str, object]:
        version = self.call(rq.get_version(), timeout=DESCRIBE_TIMEOUT_S)
        self.ensure_transports()
        return {
            "name": self.name,
            "version": (version or {}).get("version"),
            "transports": sorted(self._transports()),
            "transport_errors": dict(self.transport_errors),
            "qos": True,
            "snapshots": True,
            "dhchap": True,
            "discovery_svcid": self.discovery_svcid,
            "connections_visible": True,  # nvmf_subsystem_get_controllers
            # raid1 over bdev_nvme without superblock (spdk/mirror.py): full-copy rebuilds only
            "mirrors": {"data_offset": 0, "write_intent_bitmap": False, "write_freeze": True},
        }

    # ---- transports ------------------------------------------------------------------
    def _transports(self) -> set[str]:
        return {str(t.get("trtype", "")).lower() for t in self.call(rq.get_transports()) or []}

    def ensure_transports(self) -> dict[str, str]:
        """Create the wanted transports; one that fails (RDMA without a device) is reported
        in describe()["transport_errors"] and the others keep working."""
        have = self._transports()
        for t in self.wanted_transports:
            if t in have:
                self.transport_errors.pop(t, None)
                continue
            try:
                self.call(rq.create_transport(t))
                self.transport_errors.pop(t, None)
            except AlreadyExists:
                self.transport_errors.pop(t, None)
            except NodeosError as e:
                self.transport_errors[t] = e.message
        self._transports_checked_on = self.rpc.connections
        return dict(self.transport_errors)

    # ---- drives ------------------------------------------------------------------------
    def attach_nvme_pcie(self, bdf: str) -> list[str]:
        """Claim a PCIe NVMe controller; returns its namespace bdevs (production drives)."""
        name = controller_name(bdf)
        existing = self._maybe(rq.get_bdevs(name + "n1"))
        if existing:
            return [b["name"] for b in existing]
        return list(self.call(rq.nvme_attach_pcie(name, bdf), timeout=ATTACH_TIMEOUT_S) or [])

    def create_aio_drive_for_tests(self, name: str, path: str, block_size: int = 4096) -> str:
        """A file-backed drive, for tests only. Its UUID is derived from its name and file, so a
        target restarted (it forgets its AIO bdevs) gets the same drive back: a raid superblock
        on it names members by UUID, and a new random one would make it another raid's drive."""
        if self._maybe(rq.get_bdevs(name)):
            return name
        stable = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"nodeos-aio:{name}:{os.path.realpath(path)}"))
        return str(
            self.call(rq.aio_create_for_tests(path, name, block_size, uuid=stable), timeout=ATTACH_TIMEOUT_S)
        )

    def create_malloc_drive_for_tests(self, name: str, size_bytes: int, block_size: int = 4096) -> str:
        """A RAM drive, for tests only."""
        if self._maybe(rq.get_bdevs(name)):
            return name
        return str(self.call(rq.malloc_create_for_tests(name, size_bytes // block_size, block_size)))

    def _resolve_devices(self, devices: list[str]) -> list[str]:
        out: list[str] = []
        for d in devices:
            m = _PCIE.match(d)
            if m:
                out.extend(self.attach_nvme_pcie(m.group(1))[:1])
            else:
                if not self._maybe(rq.get_bdevs(d)):
                    raise NotFound(f"SPDK has no bdev {d!r}", field="devices")
                out.append(d)
        return out

    # ---- pools -------------------------------------------------------------------------
    def create_pool(self, pool_id: str, devices: list[str]) -> PoolInfo:
        lvs = lvs_name(pool_id)
        if not devices:
            raise BadInput("a pool needs at least one drive", field="devices")
        found = self._maybe(rq.get_lvstores(lvs))
        if found:
            return self._pool_info(found[0])
        bdevs = self._resolve_devices(devices)
        base = bdevs[0]
        if len(bdevs) > 1:
            base = f"{lvs}_raid0"
            if not self._maybe(rq.get_bdevs(base)):
                try:
                    self.call(rq.raid0_create(base, bdevs))
                except AlreadyExists as e:  # not "exists already": see raid_conflict
                    raise raid_conflict(base, bdevs, self._maybe(rq.raid_get_bdevs("all")) or [], e) from None
        self.call(rq.lvstore_create(base, lvs))
        return self._pool_info(self.call(rq.get_lvstores(lvs))[0])

    def delete_pool(self, pool_id: str) -> None:
        lvs = lvs_name(pool_id)
        found = self._maybe(rq.get_lvstores(lvs))
        if not found:
            return
        lvols = self.call(rq.get_lvols(lvs)) or []
        if lvols:
            raise OperationFailed(
                f"pool {pool_id!r} still holds {len(lvols)} volume(s); delete them first", field="pool_id"
            )
        base = found[0].get("base_bdev", "")
        self._cluster_size.pop(pool_id, None)
        self.call(rq.lvstore_delete(lvs))
        if base == f"{lvs}_raid0":
            self.call(rq.raid_delete(base))

    def list_pools(self) -> list[PoolInfo]:
        return [
            self._pool_info(s)
            for s in self.call(rq.get_lvstores()) or []
            if str(s.get("name", "")).startswith(LVS_PREFIX)
        ]

    def _remember_cluster(self, s: dict[str, Any]) -> tuple[str, int]:
        """An lvstore's pool id and cluster size, the size kept (an lvstore's never changes)."""
        cs = int(s.get("cluster_size", 0))
        pool_id = str(s["name"])[len(LVS_PREFIX) :]
        if cs > 0:
            self._cluster_size[pool_id] = cs
        return pool_id, cs

    def _pool_info(self, s: dict[str, Any]) -> PoolInfo:
        pool_id, cs = self._remember_cluster(s)
        base = str(s.get("base_bdev", ""))
        devices: tuple[str, ...] = (base,)
        if base.endswith("_raid0"):
            b = self._maybe(rq.get_bdevs(base)) or []
            raid = ((b[0].get("driver_specific") or {}).get("raid") or {}) if b else {}
            members = [m.get("name") for m in raid.get("base_bdevs_list") or [] if m.get("name")]
            devices = tuple(members) or devices
        return PoolInfo(
            pool_id=pool_id,
            size_bytes=int(s.get("total_data_clusters", 0)) * cs,
            free_bytes=int(s.get("free_clusters", 0)) * cs,
            devices=devices,
        )

    # ---- volumes -----------------------------------------------------------------------
    def _bdev(self, pool_id: str, vol_id: str, field: str = "vol_id") -> dict[str, Any] | None:
        found = self._maybe(rq.get_bdevs(alias(pool_id, vol_id, field)))
        return found[0] if found else None

    def _require(self, pool_id: str, vol_id: str, field: str = "vol_id") -> dict[str, Any]:
        b = self._bdev(pool_id, vol_id, field)
        if b is None:
            raise NotFound(f"no volume {vol_id!r} in pool {pool_id!r}", field=field)
        return b

    def _vinfo(self, pool_id: str, b: dict[str, Any]) -> VolumeInfo:
        lv = parse.bdev_lvol(b) or {}
        a = parse.lvol_alias(b) or ""
        return VolumeInfo(
            pool_id=pool_id,
            vol_id=a.partition("/")[2] or str(b.get("name")),
            size_bytes=parse.bdev_size(b),
            kind=parse.lvol_kind(lv),  # type: ignore[arg-type]
            origin=lv.get("base_snapshot"),
            device=a or str(b.get("name")),
        )

    def _cluster_of(self, pool_id: str) -> int:
        """The pool's cluster size: cached, read once per pool (list_pools at start fills it)."""
        if pool_id not in self._cluster_size:
            found = self._maybe(rq.get_lvstores(lvs_name(pool_id)))
            if not found:
                raise NotFound(f"no pool {pool_id!r}", field="pool_id")
            self._remember_cluster(found[0])  # not _pool_info: its raid member lookup is not needed
        return self._cluster_size[pool_id]

    def create_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo:
        """One RPC the first time: the lvol's UUID is bdev_lvol_create's answer, its size the
        request rounded up to whole clusters. A retried create (SPDK: -17, the name is taken)
        reads the volume and checks it is the one asked for."""
        _check_size(size_bytes)
        try:  # made at once: SPDK refuses a taken name (-17) and a missing lvstore (-19)
            made = self.call(rq.lvol_create(lvs_name(pool_id), check_id(vol_id, "vol_id"), size_bytes))
        except NotFound:
            raise NotFound(f"no pool {pool_id!r}", field="pool_id") from None
        except AlreadyExists:  # made before (a replayed create): the same volume, or refused
            b = self._require(pool_id, vol_id)
            if parse.bdev_size(b) < size_bytes or (parse.bdev_lvol(b) or {}).get("snapshot"):
                raise AlreadyExists(
                    f"{vol_id!r} already exists with size {parse.bdev_size(b)}", field="vol_id"
                ) from None
            return self._vinfo(pool_id, b)
        if not isinstance(made, str) or not made:  # an answer without the UUID: read it
            return self._vinfo(pool_id, self._require(pool_id, vol_id))
        return self._new_lvol(pool_id, vol_id, size_bytes)

    def _new_lvol(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo:
        """What a read would say of a thin lvol bdev_lvol_create made just now: its size is the
        request in whole clusters."""
        size = parse.lvol_size(size_bytes, self._cluster_of(pool_id))
        return VolumeInfo(
            pool_id=pool_id, vol_id=vol_id, size_bytes=size, kind="volume", device=alias(pool_id, vol_id)
        )

    def create_volumes(
        self, wanted: Sequence[NewVolume], made: Callable[[], None] | None = None
    ) -> list[MadeVolume | NodeosError]:
        """Volume creates sent together (issue 11: SPDK answers requests at its RPC poll, 5-8 ms
        one at a time, about the same for 64 pipelined). Each new volume's requests go in rounds
        (new_volume_rounds: the lvol with its subsystem, then namespace and hosts, then each
        listener) and round k of every volume is pipelined together, so N creates cost the round
        trips of one. Nothing is read: what was made is what was asked. A volume whose request
        failed sends no more and goes on alone (create_volume, apply_export: a replayed create or
        a subsystem an earlier run left are read and completed; else its error, and a subsystem
        made here is deleted again). `made()` runs once the first round was answered."""
        out: list[MadeVolume | NodeosError | None] = [None] * len(wanted)
        plans: list[tuple[int, list[list[rq.Request]], ExportInfo | None]] = []
        for i, w in enumerate(wanted):
            try:
                _check_size(w.size_bytes)
                new = rq.lvol_create(lvs_name(w.pool_id), check_id(w.vol_id, "vol_id"), w.size_bytes)
                export, info = self._plan_new_export(w.export) if w.export is not None else ([], None)
            except NodeosError as e:
                out[i] = e
                continue
            plans.append((i, rq.new_volume_rounds(new, export), info))
        try:
            answers = self._send_rounds([rounds for _, rounds, _ in plans], made)
        except OperationFailed:  # the connection broke: each goes on alone, finding what was made
            answers = [[UNSENT] * sum(map(len, rounds)) for _, rounds, _ in plans]
        if not plans and made is not None:
            made()
        for (i, rounds, info), res in zip(plans, answers, strict=True):
            w = wanted[i]
            sent = [req for r in rounds for req in r]
            try:
                vol = self._new_lvol(w.pool_id, w.vol_id, w.size_bytes) if _made(res[0]) and res[0] else None
                if vol is not None and all(map(_made, res)) and (info is not None or w.export is None):
                    out[i] = MadeVolume(vol, info)
                    continue
                vol = vol or self.create_volume(w.pool_id, w.vol_id, w.size_bytes)
                out[i] = MadeVolume(vol, self.apply_export(w.export) if w.export is not None else None)
            except NodeosError as e:
                out[i] = e
                if any(
                    m == "nvmf_create_subsystem" and _made(r) for (m, _), r in zip(sent, res, strict=True)
                ):
                    assert w.export is not None
                    self._maybe(rq.delete_subsystem(w.export.nqn))  # nothing half-made is left behind
        return [x for x in out if x is not None]

    def resize_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo:
        _check_size(size_bytes)
        b = self._require(pool_id, vol_id)
        cur = parse.bdev_size(b)
        if (parse.bdev_lvol(b) or {}).get("snapshot"):
            raise BadInput(f"{vol_id!r} is a snapshot; snapshots cannot be resized", field="vol_id")
        if size_bytes < cur:
            raise BadInput(
                f"size {size_bytes} is smaller than the volume ({cur}); shrinking is refused",
                field="size_bytes",
                allowed=f">= {cur}",
            )
        if size_bytes > cur:
            # SPDK tells connected hosts itself (namespace attribute change AEN).
            self.call(rq.lvol_resize(alias(pool_id, vol_id), size_bytes))
            b = self._require(pool_id, vol_id)
        return self._vinfo(pool_id, b)

    def delete_volume(self, pool_id: str, vol_id: str) -> None:
        b = self._bdev(pool_id, vol_id)
        if b is None:
            return
        if b.get("claimed"):
            raise OperationFailed(
                f"volume {vol_id!r} is in use (exported); remove the export first", field="vol_id"
            )
        # A primary's tracking snapshots under it (spdk/resync.py) go with it: nothing lists them.
        lvols = self._lvols(lvs_name(pool_id))
        internal = [n for n in chain(lvols, vol_id) if is_internal(n)]
        self.call(rq.lvol_delete(alias(pool_id, vol_id)))
        self._delete_all(lvs_name(pool_id), internal)

    def snapshot_volume(self, pool_id: str, vol_id: str, snap_id: str) -> VolumeInfo:
        """One RPC round (a replicated volume's writes are held meanwhile): the volume's read and
        the snapshot sent together; SPDK answers the read as it takes it, before the snapshot
        starts, so the snapshot's size is the volume's as read. SPDK refuses a taken name ("File
        exists") and a missing volume (-19); a retried snapshot finds its name taken and is read
        and checked."""
        check_id(snap_id, "snap_id")
        origin = alias(pool_id, vol_id)
        read, taken = self.rpc.call_many([rq.get_bdevs(origin), rq.lvol_snapshot(origin, snap_id)])
        try:
            if isinstance(taken, SpdkRpcError):
                raise map_error(taken.method, taken.params, taken.code, taken.message)
        except AlreadyExists:
            s = self._require(pool_id, snap_id, "snap_id")
            if (parse.bdev_lvol(s) or {}).get("snapshot"):
                return self._vinfo(pool_id, s)
            raise AlreadyExists(
                f"{snap_id!r} already exists and is not a snapshot", field="snap_id"
            ) from None
        except NotFound:
            raise NotFound(f"no volume {vol_id!r} in pool {pool_id!r}", field="vol_id") from None
        if isinstance(read, SpdkRpcError) or not read:  # taken, its volume unread: read the snapshot
            return self._vinfo(pool_id, self._require(pool_id, snap_id, "snap_id"))
        size = parse.bdev_size(read[0])
        return VolumeInfo(
            pool_id=pool_id,
            vol_id=snap_id,
            size_bytes=size,
            kind="snapshot",
            device=alias(pool_id, snap_id, "snap_id"),
        )

    def clone_snapshot(self, pool_id: str, snap_id: str, new_vol_id: str) -> VolumeInfo:
        c = self._bdev(pool_id, new_vol_id, "new_vol_id")
        if c is not None:
            if (parse.bdev_lvol(c) or {}).get("base_snapshot") == snap_id:
                return self._vinfo(pool_id, c)
            raise AlreadyExists(f"{new_vol_id!r} already exists", field="new_vol_id")
        s = self._require(pool_id, snap_id, "snap_id")
        if not (parse.bdev_lvol(s) or {}).get("snapshot"):
            raise BadInput(f"{snap_id!r} is not a snapshot", field="snap_id")
        self.call(rq.lvol_clone(alias(pool_id, snap_id, "snap_id"), new_vol_id))
        return self._vinfo(pool_id, self._require(pool_id, new_vol_id, "new_vol_id"))

    def list_volumes(self, pool_id: str | None = None) -> list[VolumeInfo]:
        prefix = lvs_name(pool_id) + "/" if pool_id is not None else LVS_PREFIX
        out = []
        for b in self.call(rq.get_bdevs()) or []:
            a = parse.lvol_alias(b)
            if parse.bdev_lvol(b) is None or not a or not a.startswith(prefix):
                continue
            if is_internal(a.partition("/")[2]):
                continue  # a mirror leg's tracking snapshot (spdk/resync.py), not a volume
            out.append(self._vinfo(a.partition("/")[0][len(LVS_PREFIX) :], b))
        return out


def _made(answer: Any) -> bool:
    """A request of create_volumes was answered without an error."""
    return answer is not UNSENT and not isinstance(answer, SpdkRpcError)


def _check_size(size_bytes: int) -> None:
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes <= 0:
        raise BadInput(f"size {size_bytes!r} is not a positive number of bytes", field="size_bytes")
