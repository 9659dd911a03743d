"""SPDK mirrors (raid1 bdevs over bdev_nvme legs), the pure parts: bdev and controller names, spec
checks, bdev_nvme timeouts, request builders, and reading raid/nvme answers into MirrorInfo and
RemoteInfo. Why SPDK mirrors look as they do: spdk/mirror.py; the edge: `SpdkMirrors` there."""

from __future__ import annotations

import hashlib
import re
import uuid as uuidlib
from typing import Any

from nodeos.dataplane.base import MirrorCaps, MirrorInfo, MirrorMember, MirrorSpec, RemoteInfo, RemoteSpec
from nodeos.dataplane.ids import check_nqn, normalize_nguid
from nodeos.dataplane.mirror_names import REPLICA_NQN_PREFIX, VIEW_PREFIX, check_mirror_shape
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk.requests import Request, listen_address
from nodeos.dataplane.spec_checks import check_remote_ids, check_seconds
from nodeos.errors import BadInput

DATA_OFFSET = 0  # no superblock: data starts at block 0 of every member
# raid1 without superblock: no data offset, no views (a secondary's front end is a stand-in); the
# write freeze holds the front end (spdk/freeze.py)
SPDK_MIRROR_CAPS = MirrorCaps(DATA_OFFSET, views=False, write_freeze=True, superblock=False)
STAND_IN_BLOCK = 4096
CTRL_PREFIX = "nodeos_rep_"
HOLD_SUFFIX = "_hold"
_BDEV_RE = re.compile(r"^[A-Za-z0-9_.:/+-]{1,240}$")


# ---- pure: names and checks -------------------------------------------------------------
def stand_in_name(view_id: str) -> str:
    """The null bdev standing in for a secondary's front end (block_view)."""
    if not isinstance(view_id, str) or not re.match(r"^[0-9a-f]{24}$", view_id):
        raise BadInput(f"view id {view_id!r} is not valid", field="view_id", allowed="24 lowercase hex")
    return VIEW_PREFIX + view_id


def is_stand_in(name: str) -> bool:
    return name.startswith(VIEW_PREFIX)


def ctrl_name(nqn: str) -> str:
    """bdev_nvme controller name of a replica subsystem (its namespace bdev is `<name>n1`)."""
    return CTRL_PREFIX + hashlib.sha256(check_nqn(nqn).encode()).hexdigest()[:20]


def nguid_uuid(nguid: str) -> str:
    """SPDK names an NVMe namespace's bdev uuid after its NGUID: the bdev is found by it."""
    return str(uuidlib.UUID(hex=normalize_nguid(nguid)))


def hold_name(mirror_id: str, slot: int) -> str:
    return f"{mirror_id}{HOLD_SUFFIX}{slot}"


def check_member(name: str, field: str = "members") -> str:
    if not isinstance(name, str) or not _BDEV_RE.match(name):
        raise BadInput(f"{field}: {name!r} is not a bdev name", field=field, allowed="an SPDK bdev name")
    return name


def check_spdk_mirror_spec(spec: MirrorSpec) -> None:
    check_mirror_shape(spec, check_member)
    if spec.data_offset_bytes != DATA_OFFSET:
        raise BadInput(
            f"data_offset_bytes {spec.data_offset_bytes!r}: SPDK mirrors keep no metadata on their "
            "members, data starts at offset 0 on every member",
            field="data_offset_bytes",
            allowed=[DATA_OFFSET],
        )
    if spec.adopt_uuid is not None:
        raise BadInput(
            "adopt_uuid: SPDK mirror members carry no superblock, there is nothing to adopt",
            field="adopt_uuid",
        )


def ctrl_timeouts(spec: RemoteSpec) -> dict[str, int]:
    """RemoteSpec's kernel-style timeouts in bdev_nvme's terms: -1 (never) is bdev_nvme's
    ctrlr_loss -1 and fast_io_fail 0; the kernel's fast_io_fail_tmo 0 (fail I/O at once) is
    bdev_nvme's earliest, the reconnect delay."""
    check_seconds(spec, ("ctrl_loss_tmo", "reconnect_delay", "fast_io_fail_tmo"))
    loss, delay, fast = spec.ctrl_loss_tmo, spec.reconnect_delay, spec.fast_io_fail_tmo
    if loss == 0:
        return {"ctrlr_loss_timeout_sec": 0, "reconnect_delay_sec": 0, "fast_io_fail_timeout_sec": 0}
    if delay <= 0 or (loss > 0 and delay > loss):
        raise BadInput(
            f"reconnect_delay {delay} must be 1..ctrl_loss_tmo ({loss}) for bdev_nvme",
            field="reconnect_delay",
        )
    # fast -1: never fail I/O early, it waits for the path (or for drop_mirror_leg)
    fast = 0 if fast < 0 else max(fast, delay) if loss < 0 else min(max(fast, delay), loss)
    return {"ctrlr_loss_timeout_sec": loss, "reconnect_delay_sec": delay, "fast_io_fail_timeout_sec": fast}


def check_remote(spec: RemoteSpec) -> None:
    check_remote_ids(spec)
    ctrl_timeouts(spec)


# ---- pure: requests ---------------------------------------------------------------------
def nvme_attach(spec: RemoteSpec) -> Request:
    # multipath disable: one controller per replica subsystem; a second path is an error.
    return "bdev_nvme_attach_controller", {
        "name": ctrl_name(spec.nqn),
        **listen_address(spec.listener),
        "subnqn": spec.nqn,
        "hostnqn": spec.host_nqn,
        "multipath": "disable",
        **ctrl_timeouts(spec),
    }


def rebuild_limit_mb(kib_per_s: int | None) -> int:
    """bdev_raid_set_options takes whole MB/s; 0 is SPDK's default (no cap)."""
    if kib_per_s is None:
        return 0
    if not isinstance(kib_per_s, int) or isinstance(kib_per_s, bool) or kib_per_s <= 0:
        raise BadInput("the rebuild limit must be positive", field="rebuild_mbps")
    return max(1, -(-kib_per_s // 1024))


# ---- pure: parsers ----------------------------------------------------------------------
def raid_of(bdev: dict[str, Any]) -> dict[str, Any] | None:
    r = (bdev.get("driver_specific") or {}).get("raid")
    return r if isinstance(r, dict) else None


def mirror_info(mirror_id: str, bdev: dict[str, Any]) -> MirrorInfo:
    """A MirrorInfo from bdev_get_bdevs of the raid bdev (driver_specific.raid)."""
    raid = raid_of(bdev) or {}
    blocklen = int(bdev.get("block_size") or 0)
    proc = raid.get("process") or {}
    target = proc.get("target") if proc.get("type") == "rebuild" else None
    total = int(bdev.get("num_blocks") or 0)
    done = int((proc.get("progress") or {}).get("blocks") or 0)
    members = []
    offset = None
    for slot, b in enumerate(raid.get("base_bdevs_list") or []):
        name = b.get("name")
        if offset is None and b.get("is_configured"):
            offset = int(b.get("data_offset") or 0) * blocklen
        if not name:
            members.append(MirrorMember(slot=slot, device=None, state="missing"))
        elif name == target:
            members.append(MirrorMember(slot, name, "rebuilding", progress=done / total if total else 0.0))
        elif b.get("is_configured"):
            members.append(MirrorMember(slot=slot, device=name, state="in_sync"))
        else:
            members.append(MirrorMember(slot=slot, device=name, state="missing"))
    return MirrorInfo(
        mirror_id=mirror_id,
        device=str(bdev.get("name") or mirror_id),
        size_bytes=parse.bdev_size(bdev),
        degraded=any(m.state != "in_sync" for m in members),
        members=tuple(members),
        array_state=str(raid.get("state") or ""),
        sync_action="rebuild" if target else "idle",
        data_offset_bytes=offset,
    )


def nvme_subnqn(bdev: dict[str, Any]) -> str | None:
    """The subsystem an NVMe bdev's namespace belongs to (driver_specific.nvme[0].trid)."""
    paths = (bdev.get("driver_specific") or {}).get("nvme") or []
    return (paths[0].get("trid") or {}).get("subnqn") if paths and isinstance(paths[0], dict) else None


# bdev_nvme's controller states in the kernel's words (nodeos/agent/legs.py waits for "live")
CTRL_STATES = {"enabled": "live", "reconnect_is_delayed": "connecting"}


def remote_infos(ctrls: list[dict[str, Any]], nguid_of: dict[str, str]) -> list[RemoteInfo]:
    """bdev_nvme_get_controllers -> replica connections; nguid_of: namespace bdev -> nguid."""
    out = []
    for c in ctrls:
        name = str(c.get("name") or "")
        for path in c.get("ctrlrs") or []:
            trid = path.get("trid") or {}
            nqn = str(trid.get("subnqn") or "")
            if not nqn.startswith(REPLICA_NQN_PREFIX):
                continue
            dev = name + "n1"
            out.append(
                RemoteInfo(
                    nqn=nqn,
                    listener=parse.listener_of(trid) if trid.get("traddr") else None,
                    state=CTRL_STATES.get(str(path.get("state") or ""), str(path.get("state") or "")),
                    device=dev if dev in nguid_of else None,
                    nguid=nguid_of.get(dev),
                    host_nqn=(path.get("host") or {}).get("nqn"),
                )
            )
    return out
