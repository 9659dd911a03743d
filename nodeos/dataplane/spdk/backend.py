"""SpdkDataPlane: the DataPlane protocol over SPDK's JSON-RPC.

Names: pool P is lvstore `nodeos_P` (over raid0 bdev `nodeos_P_raid0` when it spans
several drives); volume V is lvol `V`, addressed by its alias `nodeos_P/V`. Every query
names its object (bdev_get_bdevs name=, nvmf_get_subsystems nqn=) so work per call does
not grow with the number of volumes (listing 3,000 subsystems takes ~10 s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
from pathlib import Path
from typing import Any

from nodeos.dataplane.base import AnaState, ExportInfo, ExportSpec, Listener, PoolInfo, VolumeInfo
from nodeos.dataplane.ids import check_id, check_nqn, normalize_nguid, normalize_uuid
from nodeos.dataplane.mirror_names import check_mirror_id
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.client import SpdkRpc, SpdkRpcError
from nodeos.dataplane.spdk.errors import map_error
from nodeos.dataplane.spdk.freeze import home_group, is_freeze_group
from nodeos.dataplane.spdk.mirror import SpdkMirrors, is_stand_in, raid_of
from nodeos.dataplane.spec_checks import check_ana_state, check_export_spec
from nodeos.errors import AlreadyExists, BadInput, NodeosError, NotFound, NotSupported, OperationFailed

LVS_PREFIX = "nodeos_"
MODEL = "nodeos volume"
QOS_IOPS_STEP = 1000  # SPDK takes IOPS limits in multiples of 1000 only
_PCIE = re.compile(r"^pcie:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])$")


def lvs_name(pool_id: str) -> str:
    return LVS_PREFIX + check_id(pool_id, "pool_id")


def alias(pool_id: str, vol_id: str, field: str = "vol_id") -> str:
    return f"{lvs_name(pool_id)}/{check_id(vol_id, field)}"


def check_qos(iops: int | None, mbps: int | None) -> tuple[int, int]:
    i, m = iops or 0, mbps or 0
    if i % QOS_IOPS_STEP:
        raise BadInput(
            f"qos_iops {i} is not a multiple of {QOS_IOPS_STEP}",
            field="qos_iops",
            allowed=f"0 (unlimited) or a multiple of {QOS_IOPS_STEP}",
        )
    return i, m


class SpdkDataPlane(SpdkMirrors):
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

    # ---- RPC with clear errors -----------------------------------------------------------
    def call(self, req: rq.Request) -> Any:
        method, params = req
        try:
            return self.rpc.call(method, params)
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
        version = self.call(rq.get_version())
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
        name = "nvme_" + re.sub(r"[^0-9a-fA-F]", "", bdf)
        existing = self._maybe(rq.get_bdevs(name + "n1"))
        if existing:
            return [b["name"] for b in existing]
        return list(self.call(rq.nvme_attach_pcie(name, bdf)) or [])

    def create_aio_drive_for_tests(self, name: str, path: str, block_size: int = 4096) -> str:
        """A file-backed drive, for tests only."""
        if self._maybe(rq.get_bdevs(name)):
            return name
        return str(self.call(rq.aio_create_for_tests(path, name, block_size)))

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
                self.call(rq.raid0_create(base, bdevs))
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
        self.call(rq.lvstore_delete(lvs))
        if base == f"{lvs}_raid0":
            self.call(rq.raid_delete(base))

    def list_pools(self) -> list[PoolInfo]:
        return [
            self._pool_info(s)
            for s in self.call(rq.get_lvstores()) or []
            if str(s.get("name", "")).startswith(LVS_PREFIX)
        ]

    def _pool_info(self, s: dict[str, Any]) -> PoolInfo:
        cs = int(s.get("cluster_size", 0))
        base = str(s.get("base_bdev", ""))
        devices: tuple[str, ...] = (base,)
        if base.endswith("_raid0"):
            b = self._maybe(rq.get_bdevs(base)) or []
            raid = ((b[0].get("driver_specific") or {}).get("raid") or {}) if b else {}
            members = [m.get("name") for m in raid.get("base_bdevs_list") or [] if m.get("name")]
            devices = tuple(members) or devices
        return PoolInfo(
            pool_id=str(s["name"])[len(LVS_PREFIX) :],
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

    def create_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo:
        _check_size(size_bytes)
        b = self._bdev(pool_id, vol_id)
        if b is None:
            if not self._maybe(rq.get_lvstores(lvs_name(pool_id))):
                raise NotFound(f"no pool {pool_id!r}", field="pool_id")
            self.call(rq.lvol_create(lvs_name(pool_id), vol_id, size_bytes))
            b = self._require(pool_id, vol_id)
        elif parse.bdev_size(b) < size_bytes or (parse.bdev_lvol(b) or {}).get("snapshot"):
            raise AlreadyExists(f"{vol_id!r} already exists with size {parse.bdev_size(b)}", field="vol_id")
        return self._vinfo(pool_id, b)

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
        self.call(rq.lvol_delete(alias(pool_id, vol_id)))

    def snapshot_volume(self, pool_id: str, vol_id: str, snap_id: str) -> VolumeInfo:
        s = self._bdev(pool_id, snap_id, "snap_id")
        if s is not None:
            if (parse.bdev_lvol(s) or {}).get("snapshot"):
                return self._vinfo(pool_id, s)
            raise AlreadyExists(f"{snap_id!r} already exists and is not a snapshot", field="snap_id")
        self._require(pool_id, vol_id)
        self.call(rq.lvol_snapshot(alias(pool_id, vol_id), snap_id))
        return self._vinfo(pool_id, self._require(pool_id, snap_id, "snap_id"))

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
            out.append(self._vinfo(a.partition("/")[0][len(LVS_PREFIX) :], b))
        return out

    # ---- exports -----------------------------------------------------------------------
    def _subsystem(self, nqn: str) -> dict[str, Any] | None:
        found = self._maybe(rq.get_subsystems(nqn))
        return next((s for s in found or [] if s.get("nqn") == nqn), None)

    def _key_name(self, host: str, key: str) -> str:
        # Named by host and secret, so a changed secret is a new key and the old one can go.
        return "nodeos-" + hashlib.sha256(f"{host}\0{key}".encode()).hexdigest()[:20]

    def _ensure_key(self, host: str, key: str) -> str:
        name = self._key_name(host, key)
        path = self.keys_dir / name
        if not path.exists():
            self.keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, key.encode())
            finally:
                os.close(fd)
        with contextlib.suppress(AlreadyExists):
            self.call(rq.keyring_add(name, str(path)))
        return name

    def apply_export(self, spec: ExportSpec) -> ExportInfo:
        mirror = spec.device is not None
        check_export_spec(dataclasses.replace(spec, device=None))  # here a device is a mirror's bdev
        stand_in = mirror and is_stand_in(str(spec.device))
        if stand_in and spec.ana_state != "inaccessible":
            raise NotSupported(
                f"{spec.device} stands in for a secondary's front end: it is exported ANA inaccessible only",
                field="ana_state",
            )
        if (
            mirror
            and not stand_in
            and not raid_of(self._mirror_bdev(check_mirror_id(str(spec.device), "device")))
        ):
            raise NotSupported("SPDK exports lvols, its mirrors and stand-ins only", field="device")
        if spec.ana_state not in rq.ANA_TO_SPDK:
            raise NotSupported(
                f"ANA state {spec.ana_state!r} is not supported by the SPDK data plane",
                field="ana_state",
                allowed=sorted(rq.ANA_TO_SPDK),
            )
        iops, mbps = check_qos(spec.qos_iops, spec.qos_mbps)
        b = self._mirror_bdev(str(spec.device)) if mirror else self._require(spec.pool_id, spec.vol_id)
        if (parse.bdev_lvol(b) or {}).get("snapshot"):
            raise BadInput(f"{spec.vol_id!r} is a snapshot; export a clone of it", field="vol_id")
        bdev = str(spec.device) if mirror else alias(spec.pool_id, spec.vol_id)
        limits = b.get("assigned_rate_limits") or {}
        if (int(limits.get("rw_ios_per_sec", 0)), int(limits.get("rw_mbytes_per_sec", 0))) != (iops, mbps):
            self.call(rq.set_qos_limit(bdev, iops, mbps))
        for li in spec.listeners:
            if li.trtype in self.transport_errors or self._transports_checked_on != self.rpc.connections:
                self.ensure_transports()
            if li.trtype in self.transport_errors:
                raise NotSupported(
                    f"cannot listen on {li.trtype}: {self.transport_errors[li.trtype]}", field="listeners"
                )
        nqn = spec.nqn
        sub = self._subsystem(nqn)
        fresh = sub is None
        if sub is None:
            self.call(
                rq.create_subsystem(
                    nqn,
                    spec.serial,
                    MODEL,
                    allow_any_host=False,
                    ana_reporting=True,
                    min_cntlid=spec.cntlid_min,
                    max_cntlid=spec.cntlid_max,
                )
            )
            sub = self._subsystem(nqn) or {}
        if mirror and not stand_in:
            self.front_ends[bdev] = nqn
        try:
            self._apply_into(spec, sub, bdev)
        except Exception:
            if fresh:
                self._maybe(rq.delete_subsystem(nqn))  # nothing half-made is left behind
            raise
        return self._export_info(nqn)

    def _apply_into(self, spec: ExportSpec, sub: dict[str, Any], bdev: str) -> None:
        nqn = spec.nqn
        ns = parse.subsystem_ns1(sub)
        uuid, nguid = normalize_uuid(spec.uuid), normalize_nguid(spec.nguid)
        want_ns = (uuid, nguid, spec.ana_group)
        group = int((ns or {}).get("anagrpid", 1))  # a frozen namespace stays frozen (spdk/freeze.py)
        if ns is not None:
            have = (str(ns.get("uuid", "")).lower(), str(ns.get("nguid", "")).lower(), home_group(group))
            same_bdev = bdev in (ns.get("bdev_name"), ns.get("name")) or ns.get("bdev_name") == self._uuid_of(
                bdev
            )
            if have != want_ns or not same_bdev:
                self.call(rq.remove_ns(nqn, 1))
                ns, group = None, spec.ana_group
        if ns is None:
            self.call(rq.add_ns(nqn, bdev, 1, uuid=uuid, nguid=nguid, anagrpid=spec.ana_group))
        # Hosts before listeners: the subsystem is never reachable with a stale host list.
        have_hosts = parse.subsystem_hosts(sub)
        for h in spec.hosts:
            key = self._ensure_key(h.host_nqn, h.dhchap_key) if h.dhchap_key else None
            if h.host_nqn in have_hosts and have_hosts[h.host_nqn] != key:
                self.call(rq.remove_host(nqn, h.host_nqn))
                del have_hosts[h.host_nqn]
            if h.host_nqn not in have_hosts:
                self.call(rq.add_host(nqn, h.host_nqn, key))
        wanted = {h.host_nqn for h in spec.hosts}
        for host in have_hosts:
            if host not in wanted:
                self.call(rq.remove_host(nqn, host))  # SPDK disconnects the host's controllers
        have_l = {parse.listener_of(a) for a in sub.get("listen_addresses") or []}
        for li in spec.listeners:
            if _norm(li) not in have_l:
                self.call(rq.add_listener(nqn, li))
            self.call(rq.set_ana_state(nqn, li, spec.ana_state, spec.ana_group))
            if is_freeze_group(group):  # a listener added while frozen holds the writes too
                self.call(rq.set_ana_state(nqn, li, "inaccessible", group))
        for li in have_l - {_norm(x) for x in spec.listeners}:
            self.call(rq.remove_listener(nqn, li))
        self._ensure_discovery(spec.listeners)

    def _uuid_of(self, bdev: str) -> str | None:
        b = self._maybe(rq.get_bdevs(bdev))
        return b[0].get("name") if b else None

    def _ensure_discovery(self, listeners: tuple[Listener, ...]) -> None:
        """SPDK's discovery subsystem lists, per host, only the subsystems it may see."""
        if not self.discovery_svcid:
            return
        have = {
            parse.listener_of(x.get("address") or {})
            for x in self._maybe(rq.get_listeners(rq.DISCOVERY_NQN)) or []
        }
        for li in listeners:
            d = Listener(trtype=li.trtype, traddr=li.traddr, trsvcid=self.discovery_svcid, adrfam=li.adrfam)
            if d not in have:
                self.call(rq.add_listener(rq.DISCOVERY_NQN, d))
                have.add(d)

    def remove_export(self, nqn: str) -> None:
        check_nqn(nqn)
        if self._subsystem(nqn) is not None:
            self.call(rq.delete_subsystem(nqn))

    def export_info(self, nqn: str) -> ExportInfo | None:
        check_nqn(nqn)
        return self._export_info(nqn) if self._subsystem(nqn) else None

    def list_exports(self) -> list[ExportInfo]:
        return [
            self._info_from(s) for s in self.call(rq.get_subsystems()) or [] if s.get("subtype") == "NVMe"
        ]

    def _export_info(self, nqn: str) -> ExportInfo:
        sub = self._subsystem(nqn)
        if sub is None:
            raise NotFound(f"no export {nqn}", field="nqn")
        return self._info_from(sub)

    def _info_from(self, sub: dict[str, Any]) -> ExportInfo:
        nqn = str(sub["nqn"])
        ns = parse.subsystem_ns1(sub) or {}
        pool_id = vol_id = None
        b = self._maybe(rq.get_bdevs(str(ns["bdev_name"]))) if ns.get("bdev_name") else None
        a = parse.lvol_alias(b[0]) if b else None
        if a and a.startswith(LVS_PREFIX):
            lvs, _, vol_id = a.partition("/")
            pool_id = lvs[len(LVS_PREFIX) :]
        grp = home_group(int(ns.get("anagrpid", 1)))  # a freeze is not a state of the export
        listeners = tuple(parse.listener_of(x) for x in sub.get("listen_addresses") or [])
        ana = None
        if listeners:
            for entry in self._maybe(rq.get_listeners(nqn)) or []:
                ana = ana or parse.listener_ana(entry, grp)
        ctrls = self._maybe(rq.get_controllers(nqn)) or []
        return ExportInfo(
            nqn=nqn,
            pool_id=pool_id,
            vol_id=vol_id,
            listeners=listeners,
            hosts=tuple(parse.subsystem_hosts(sub)),
            ana_state=ana,
            connected_hosts=tuple(sorted({str(c.get("hostnqn")) for c in ctrls if c.get("hostnqn")})),
            device=str(ns["bdev_name"])
            if ns.get("bdev_name") and b and (raid_of(b[0]) or is_stand_in(str(ns["bdev_name"])))
            else None,
        )

    def set_ana_state(self, nqn: str, ana_group: int, state: AnaState) -> None:
        check_nqn(nqn)
        check_ana_state(state)
        if state not in rq.ANA_TO_SPDK:
            raise NotSupported(
                f"ANA state {state!r} is not supported by the SPDK data plane",
                field="ana_state",
                allowed=sorted(rq.ANA_TO_SPDK),
            )
        sub = self._subsystem(nqn)
        if sub is None:
            raise NotFound(f"no export {nqn}", field="nqn")
        for a in sub.get("listen_addresses") or []:
            self.call(rq.set_ana_state(nqn, parse.listener_of(a), state, ana_group))

    def fence_export(self, nqn: str, drop_hosts: bool = False) -> bool:
        """SPDK keeps ANA states per subsystem and listener: the namespace's own group goes
        inaccessible on each of the subsystem's listeners (no other subsystem is touched).
        `drop_hosts` changes nothing here: SPDK refuses the demote that asks for it."""
        check_nqn(nqn)
        sub = self._subsystem(nqn)
        if sub is None:
            return False
        grp = int((parse.subsystem_ns1(sub) or {}).get("anagrpid", 1))
        for a in sub.get("listen_addresses") or []:
            # the home group too while frozen (spdk/freeze.py): a thaw lands in a fenced group
            for g in sorted({grp, home_group(grp)}):
                self.call(rq.set_ana_state(nqn, parse.listener_of(a), "inaccessible", g))
        return True


def _norm(li: Listener) -> Listener:
    return Listener(trtype=li.trtype, traddr=li.traddr, trsvcid=str(li.trsvcid), adrfam=li.adrfam)


def _check_size(size_bytes: int) -> None:
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes <= 0:
        raise BadInput(f"size {size_bytes!r} is not a positive number of bytes", field="size_bytes")
