"""LVM thin: command building and report parsing (pure), and a runner (the edge).

Naming: pool `P` is VG `nodeos_P` with thin pool LV `tpool`; volume, snapshot or clone `V`
is thin LV `v_V`, its kind kept in an LV tag (`nodeos_kind_<kind>`), so LVM's own metadata
says what each LV is after any crash.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeos.bounded_run import run_bounded
from nodeos.dataplane.ids import check_id
from nodeos.dataplane.kernel import lvm_scan
from nodeos.errors import BadInput, NotFound, OperationFailed

VG_PREFIX = "nodeos_"
THIN_POOL = "tpool"
LV_PREFIX = "v_"
KIND_TAG = "nodeos_kind_"
KINDS = ("volume", "snapshot", "clone")
# LVM refuses LV names containing these (they name its internal sub-LVs).
_RESERVED = (
    "_cdata",
    "_cmeta",
    "_corig",
    "_iorig",
    "_mimage",
    "_mlog",
    "_pmspare",
    "_rimage",
    "_rmeta",
    "_tdata",
    "_tmeta",
    "_vdo",
    "_vorigin",
    "_wcorig",
)
# The share of the VG given to the thin pool's data; the rest holds metadata and its spare.
POOL_PERCENT = 95


def vg_name(pool_id: str) -> str:
    return VG_PREFIX + check_id(pool_id, "pool_id")


def lv_name(vol_id: str, field: str = "vol_id") -> str:
    check_id(vol_id, field)
    if any(r in vol_id for r in _RESERVED):
        raise BadInput(
            f"{field} {vol_id!r} contains a name LVM reserves",
            field=field,
            allowed=f"ids without {', '.join(_RESERVED)}",
        )
    return LV_PREFIX + vol_id


def pool_id_of(vg: str) -> str | None:
    return vg[len(VG_PREFIX) :] if vg.startswith(VG_PREFIX) else None


def vol_id_of(lv: str) -> str | None:
    return lv[len(LV_PREFIX) :] if lv.startswith(LV_PREFIX) else None


def ids_of_path(device: str) -> tuple[str, str] | None:
    """(pool_id, vol_id) of one of our LVs' device paths (/dev/<vg>/<lv>), else None."""
    parts = device.split("/")
    if len(parts) != 4 or parts[0] or parts[1] != "dev":
        return None
    pool_id, vol_id = pool_id_of(parts[2]), vol_id_of(parts[3])
    return (pool_id, vol_id) if pool_id and vol_id else None


# ---- commands (pure) ----------------------------------------------------------------------
def cmd_pvcreate(devices: Sequence[str]) -> list[str]:
    return ["pvcreate", "-y", *devices]


def cmd_vgcreate(pool_id: str, devices: Sequence[str]) -> list[str]:
    return ["vgcreate", "-y", vg_name(pool_id), *devices]


# Activating a thin LV activates its pool, which runs thin_check first. After a power loss the
# pool's space map may have leaked a block (allocated, never committed to a mapping: harmless,
# measured in the lab after a VM was killed); Debian's default options make thin_check fail on
# that and the pool would not come up ("Manual repair required!"). Real errors still fail it.
# Every command that may activate the pool carries it: not only lvchange -ay, also lvcreate of a
# new thin LV, snapshot or clone, lvextend and lvremove on a node just powered on (lab, drive
# pull test: a create on the rebooted node failed with status 64).
THIN_CHECK_CONFIG = (
    'global { thin_check_options = [ "-q", "--clear-needs-check-flag", "--ignore-non-fatal-errors" ] }'
)


def _pool_checked(cmd: list[str]) -> list[str]:
    """cmd with the thin_check options above (it may activate the thin pool)."""
    return [cmd[0], "--config", THIN_CHECK_CONFIG, *cmd[1:]]


def cmd_thin_pool(pool_id: str, n_devices: int) -> list[str]:
    cmd = ["lvcreate", "-y", "--type", "thin-pool", "-l", f"{POOL_PERCENT}%FREE", "-n", THIN_POOL]
    if n_devices > 1:
        # Stripe the data over every drive: the kernel analogue of SPDK's raid0 bdev.
        cmd += ["--stripes", str(n_devices), "--stripesize", "64k"]
    return [*cmd, vg_name(pool_id)]


def cmd_vgremove(pool_id: str) -> list[str]:
    return ["vgremove", "-y", "-f", vg_name(pool_id)]


def cmd_pvremove(devices: Sequence[str]) -> list[str]:
    return ["pvremove", "-y", *devices]


def cmd_create_thin(pool_id: str, vol_id: str, size_bytes: int) -> list[str]:
    return _pool_checked(
        [
            "lvcreate",
            "-y",
            "-n",
            lv_name(vol_id),
            "-V",
            f"{size_bytes}b",
            "--thinpool",
            THIN_POOL,
            "--addtag",
            KIND_TAG + "volume",
            "--setactivationskip",
            "n",
            vg_name(pool_id),
        ]
    )


def cmd_snapshot(pool_id: str, vol_id: str, snap_id: str) -> list[str]:
    # Thin snapshot (no size), read-only; it stays inactive until something needs it.
    return _pool_checked(
        [
            "lvcreate",
            "-y",
            "-s",
            "-n",
            lv_name(snap_id, "snap_id"),
            "--permission",
            "r",
            "--addtag",
            KIND_TAG + "snapshot",
            f"{vg_name(pool_id)}/{lv_name(vol_id)}",
        ]
    )


def cmd_clone(pool_id: str, snap_id: str, new_vol_id: str) -> list[str]:
    # A writable thin snapshot of the snapshot; activation skip off so it comes up at boot.
    return _pool_checked(
        [
            "lvcreate",
            "-y",
            "-s",
            "-n",
            lv_name(new_vol_id, "new_vol_id"),
            "--permission",
            "rw",
            "--setactivationskip",
            "n",
            "--addtag",
            KIND_TAG + "clone",
            f"{vg_name(pool_id)}/{lv_name(snap_id, 'snap_id')}",
        ]
    )


def cmd_activate(pool_id: str, vol_id: str) -> list[str]:
    return _pool_checked(["lvchange", "-ay", "-K", f"{vg_name(pool_id)}/{lv_name(vol_id)}"])


def cmd_extend(pool_id: str, vol_id: str, size_bytes: int) -> list[str]:
    return _pool_checked(["lvextend", "-y", "-L", f"{size_bytes}b", f"{vg_name(pool_id)}/{lv_name(vol_id)}"])


def cmd_lvremove(pool_id: str, vol_id: str) -> list[str]:
    return _pool_checked(["lvremove", "-y", f"{vg_name(pool_id)}/{lv_name(vol_id)}"])


LVS_FIELDS = "vg_name,lv_name,lv_size,origin,lv_tags,lv_attr,pool_lv,lv_path,data_percent,lv_dm_path"


def cmd_lvs(pool_id: str | None = None) -> list[str]:
    cmd = ["lvs", "--reportformat", "json", "--units", "b", "--nosuffix", "-a", "-o", LVS_FIELDS]
    return [*cmd, vg_name(pool_id)] if pool_id is not None else cmd


def cmd_pvs() -> list[str]:
    return ["pvs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "pv_name,vg_name,pv_size"]


# ---- reports (pure) -----------------------------------------------------------------------
@dataclass(frozen=True)
class Lv:
    vg: str
    name: str
    size_bytes: int
    origin: str
    tags: tuple[str, ...]
    attr: str
    pool_lv: str
    path: str
    data_percent: float | None

    @property
    def active(self) -> bool:
        return len(self.attr) > 4 and self.attr[4] == "a"

    @property
    def kind(self) -> str:
        for t in self.tags:
            if t.startswith(KIND_TAG) and t[len(KIND_TAG) :] in KINDS:
                return t[len(KIND_TAG) :]
        return "volume"


def _report_rows(text: str, key: str) -> list[dict[str, Any]]:
    try:
        doc = json.loads(text)
        return [row for rep in doc.get("report", []) for row in rep.get(key, [])]
    except (ValueError, AttributeError, TypeError) as e:
        raise OperationFailed(f"could not parse LVM's JSON report: {e}") from None


def _int(v: Any) -> int:
    try:
        return int(str(v).strip() or 0)
    except ValueError:
        return 0


def parse_lvs(text: str) -> list[Lv]:
    out = []
    for r in _report_rows(text, "lv"):
        dp = str(r.get("data_percent", "")).strip()
        out.append(
            Lv(
                vg=r.get("vg_name", ""),
                name=r.get("lv_name", "").strip("[]"),
                size_bytes=_int(r.get("lv_size")),
                origin=r.get("origin", "") or "",
                tags=tuple(t for t in (r.get("lv_tags", "") or "").split(",") if t),
                attr=r.get("lv_attr", ""),
                pool_lv=r.get("pool_lv", "") or "",
                path=r.get("lv_path", "") or r.get("lv_dm_path", "") or "",
                data_percent=float(dp) if dp else None,
            )
        )
    return out


def parse_pvs(text: str) -> list[tuple[str, str, int]]:
    """(pv_name, vg_name, pv_size) rows."""
    return [
        (r.get("pv_name", ""), r.get("vg_name", ""), _int(r.get("pv_size"))) for r in _report_rows(text, "pv")
    ]


# ---- runner (edge) ------------------------------------------------------------------------
def report_errors(stdout: str) -> list[str]:
    """Error messages LVM put in the "log" part of a JSON report (not on stderr)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return []
    log = doc.get("log", []) if isinstance(doc, dict) else []
    return [
        str(e.get("log_message", "")) for e in log if isinstance(e, dict) and e.get("log_type") == "error"
    ]


class LvmError(OperationFailed):
    def __init__(self, cmd: Sequence[str], rc: int, stderr: str, stdout: str = "") -> None:
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        lines += report_errors(stdout)
        stderr = "\n".join([stderr, *report_errors(stdout)])
        detail = "; ".join(lines[-3:]) or f"exit status {rc}"
        super().__init__(f"{cmd[0]} failed: {detail}")
        self.cmd = list(cmd)
        self.rc = rc
        self.stderr = stderr

    @property
    def not_found(self) -> bool:
        s = self.stderr
        return "not found" in s or "Failed to find" in s or "does not exist" in s


REPORTS = ("lvs", "pvs", "vgs")  # the commands that change nothing
# A report younger than this is answered again without running LVM, unless a command that
# changes LVM ran (or began) since. The agent's pass, the metrics and the orphan scan each list
# the LVs: one `lvs` costs ~30 ms on hardware but 1-3 s of CPU on a TCG VM, where about 20 such
# listings a minute took (estimated) a third of an idle node's CPU. A change made outside
# nodeosd shows here at most this late.
REPORT_REUSE_S = 5.0


class LvmRunner:
    """Runs LVM commands, each bounded (bounded_run.py) and blind to every device that is not a
    drive of this machine (lvm_scan.py); recent reports are reused (REPORT_REUSE_S)."""

    def __init__(
        self,
        timeout_s: float = 300.0,
        sys_block: Path = lvm_scan.SYS_BLOCK,
        reuse_s: float = REPORT_REUSE_S,
    ) -> None:
        self.timeout_s = timeout_s
        self.sys_block = sys_block
        self.reuse_s = reuse_s
        self._lock = threading.Lock()  # data plane calls run on several threads (daemon/lanes.py)
        self._changes = 0  # commands that change LVM, counted when they begin and when they end
        self._reports: dict[tuple[str, ...], tuple[int, float, str]] = {}  # cmd -> (changes, at, out)

    def run(self, cmd: Sequence[str]) -> str:
        key = tuple(cmd)
        if not key or key[0] not in REPORTS:
            self._changed()
            try:
                return self._run(cmd)
            finally:
                self._changed()
        now = time.monotonic()
        with self._lock:
            changes, hit = self._changes, self._reports.get(key)
        if hit is not None and hit[0] == changes and now - hit[1] <= self.reuse_s:
            return hit[2]
        out = self._run(cmd)
        with self._lock:
            if self._changes == changes:  # nothing changed while it ran: it is still true
                self._reports[key] = (changes, now, out)
        return out

    def _changed(self) -> None:
        with self._lock:
            self._changes += 1
            self._reports.clear()

    def _run(self, cmd: Sequence[str]) -> str:
        env = dict(os.environ, LC_ALL="C", LVM_SUPPRESS_FD_WARNINGS="1")
        setting = lvm_scan.global_filter(lvm_scan.local_namespaces(self.sys_block))
        p = run_bounded(lvm_scan.with_filter(list(cmd), setting), self.timeout_s, env, package="lvm2")
        if p.returncode != 0:
            raise LvmError(cmd, p.returncode, p.stderr, p.stdout)
        return p.stdout

    def lvs(self, pool_id: str | None = None) -> list[Lv]:
        try:
            return parse_lvs(self.run(cmd_lvs(pool_id)))
        except LvmError as e:
            if pool_id is not None and e.not_found:
                return []
            raise

    def find(self, pool_id: str, vol_id: str) -> Lv | None:
        name = lv_name(vol_id)
        return next((lv for lv in self.lvs(pool_id) if lv.name == name), None)

    def require(self, pool_id: str, vol_id: str, field: str = "vol_id") -> Lv:
        lv = self.find(pool_id, vol_id)
        if lv is None:
            raise NotFound(f"no volume {vol_id!r} in pool {pool_id!r}", field=field)
        return lv
