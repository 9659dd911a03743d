"""The kernel NVMe-oF initiator on a storage node: replica legs of a mirror (issue 8).

A primary attaches each replica's namespace with the kernel initiator (nvme-tcp/nvme-rdma)
by writing a connect string to /dev/nvme-fabrics, always with hostnqn AND hostid (a lone
hostnqn fails once the node used another NQN with the same host id), and finds the block
device by the namespace's fixed NGUID, never by name order. Pure parts first (connect string,
sysfs snapshot parsing), then `Initiator`, the edge that reads sysfs and writes the device.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeos.dataplane.base import Listener, RemoteInfo, RemoteSpec
from nodeos.dataplane.ids import check_nqn, normalize_nguid, normalize_uuid
from nodeos.dataplane.mirror_names import REPLICA_NQN_PREFIX
from nodeos.dataplane.spec_checks import check_remote_ids, check_seconds
from nodeos.errors import BadInput, EnvironmentProblem, NotFound, OperationFailed
from nodeos.sysfs import read_attr

FABRICS_DEV = Path("/dev/nvme-fabrics")
SYS_CLASS_NVME = Path("/sys/class/nvme")
SYS_BLOCK = Path("/sys/block")
# A leg about to be cut gives up a lost path after this long (ctrl_loss_tmo, seconds).
LOSS_BOUND_S = 1
_DISK_RE = re.compile(r"^nvme\d+n\d+$")  # multipath heads and plain namespaces, not nvmeXcYnZ paths


@dataclass(frozen=True)
class Ctrl:
    name: str  # nvmeN
    nqn: str
    transport: str
    address: dict[str, str]
    state: str
    host_nqn: str


@dataclass(frozen=True)
class Disk:
    name: str  # nvmeXnY
    nguid: str | None  # 32 hex digits
    holders: tuple[str, ...]  # e.g. ("md127",): a mirror uses it
    subsys_nqn: str | None = None


# ---- pure -----------------------------------------------------------------------------
def check_remote_spec(spec: RemoteSpec) -> None:
    check_remote_ids(spec)
    check_seconds(spec, ("keep_alive_tmo", "ctrl_loss_tmo", "fast_io_fail_tmo", "reconnect_delay"))


def connect_string(spec: RemoteSpec) -> str:
    """The options line /dev/nvme-fabrics takes (what nvme-cli writes for `nvme connect`)."""
    li = spec.listener
    opts = [
        f"transport={li.trtype}",
        f"traddr={li.traddr}",
        f"trsvcid={li.trsvcid}",
        f"nqn={spec.nqn}",
        f"hostnqn={spec.host_nqn}",
        f"hostid={normalize_uuid(spec.host_id, 'host_id')}",
        f"keep_alive_tmo={spec.keep_alive_tmo}",
        f"ctrl_loss_tmo={spec.ctrl_loss_tmo}",
        f"fast_io_fail_tmo={spec.fast_io_fail_tmo}",
        f"reconnect_delay={spec.reconnect_delay}",
    ]
    return ",".join(opts)


def parse_address(text: str) -> dict[str, str]:
    """sysfs `address` ("traddr=198.18.0.12,trsvcid=4420,src_addr=...") as a dict."""
    out: dict[str, str] = {}
    for part in text.strip().split(","):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def controllers_of(ctrls: list[Ctrl], nqn: str, listener: Listener | None = None) -> list[Ctrl]:
    """Controllers to `nqn` (at `listener` when given) that are not being deleted."""
    out = []
    for c in ctrls:
        if c.nqn != nqn or c.state == "deleting":
            continue
        if listener is not None and (
            c.transport != listener.trtype
            or c.address.get("traddr") != listener.traddr
            or c.address.get("trsvcid") != str(listener.trsvcid)
        ):
            continue
        out.append(c)
    return out


def is_live(ctrls: list[Ctrl]) -> bool:
    return any(c.state == "live" for c in ctrls)


def disk_with_nguid(disks: list[Disk], nguid: str) -> Disk | None:
    want = normalize_nguid(nguid)
    found = [d for d in disks if d.nguid == want]
    if len(found) > 1:
        # Two block devices with one NGUID: multipath is off and there are two paths. Using
        # either under md would be wrong (md would see one leg twice).
        names = ", ".join(d.name for d in found)
        raise OperationFailed(f"NGUID {want} is on more than one block device ({names}); is multipath off?")
    return found[0] if found else None


def remote_infos(ctrls: list[Ctrl], disks: list[Disk], prefix: str = REPLICA_NQN_PREFIX) -> list[RemoteInfo]:
    out = []
    for c in sorted(ctrls, key=lambda c: (c.nqn, c.name)):
        if not c.nqn.startswith(prefix):
            continue
        disk = next((d for d in disks if d.subsys_nqn == c.nqn), None)
        li = None
        if c.address.get("traddr") and c.address.get("trsvcid") and c.transport in ("tcp", "rdma"):
            fam = "ipv6" if ":" in c.address["traddr"] else "ipv4"
            li = Listener(c.transport, c.address["traddr"], c.address["trsvcid"], fam)  # type: ignore[arg-type]
        out.append(
            RemoteInfo(
                nqn=c.nqn,
                listener=li,
                state=c.state,
                device=f"/dev/{disk.name}" if disk else None,
                nguid=disk.nguid if disk else None,
                host_nqn=c.host_nqn or None,
            )
        )
    return out


# ---- edge -----------------------------------------------------------------------------
class Initiator:
    def __init__(
        self,
        fabrics: Path = FABRICS_DEV,
        sys_nvme: Path = SYS_CLASS_NVME,
        sys_block: Path = SYS_BLOCK,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.fabrics = fabrics
        self.sys_nvme = sys_nvme
        self.sys_block = sys_block
        self.sleep = sleep

    def controllers(self) -> list[Ctrl]:
        out = []
        for p in sorted(self.sys_nvme.glob("nvme*")):
            nqn = read_attr(p / "subsysnqn")
            if not nqn:
                continue
            out.append(
                Ctrl(
                    name=p.name,
                    nqn=nqn,
                    transport=read_attr(p / "transport"),
                    address=parse_address(read_attr(p / "address")),
                    state=read_attr(p / "state"),
                    host_nqn=read_attr(p / "hostnqn"),
                )
            )
        return out

    def disks(self) -> list[Disk]:
        out = []
        for p in sorted(self.sys_block.glob("nvme*n*")):
            if not _DISK_RE.match(p.name):
                continue
            raw = read_attr(p / "nguid") or read_attr(p / "device" / "nguid")
            try:
                nguid = normalize_nguid(raw) if raw else None
            except BadInput:
                nguid = None
            try:
                holders = tuple(sorted(os.listdir(p / "holders")))
            except OSError:
                holders = ()
            # A multipath head's subsystem is its parent directory (nvme-subsysN); a plain
            # namespace's is its controller's.
            nqn = read_attr(p / "device" / "subsysnqn") or None
            out.append(Disk(p.name, nguid if nguid != "0" * 32 else None, holders, nqn))
        return out

    def attach(self, spec: RemoteSpec, timeout_s: float = 60.0) -> str:
        check_remote_spec(spec)
        if not controllers_of(self.controllers(), spec.nqn, spec.listener):
            self._connect(spec)
        deadline = time.monotonic() + timeout_s
        while True:
            # Namespaces are scanned asynchronously after the connect returns; and a multipath
            # head outlives its controller's reconnects: only a live path makes the device usable
            # (md re-adding a leg whose controller is still connecting fails it again at once).
            ctrls = controllers_of(self.controllers(), spec.nqn, spec.listener)
            disk = disk_with_nguid(self.disks(), spec.nguid)
            if disk is not None and is_live(ctrls):
                return f"/dev/{disk.name}"
            if time.monotonic() > deadline:
                states = ", ".join(c.state for c in ctrls) or "no controller"
                raise OperationFailed(
                    f"{spec.nqn}: no live path with a namespace of NGUID {normalize_nguid(spec.nguid)} "
                    f"within {timeout_s:.0f} s ({states})",
                    field="nqn",
                )
            self.sleep(0.2)

    def _connect(self, spec: RemoteSpec) -> None:
        line = connect_string(spec)
        try:
            fd = os.open(self.fabrics, os.O_RDWR)
        except FileNotFoundError:
            raise EnvironmentProblem(
                f"{self.fabrics} is missing: load the initiator (modprobe nvme-{spec.listener.trtype})"
            ) from None
        except OSError as e:
            raise OperationFailed(f"could not open {self.fabrics}: {e.strerror}") from None
        try:
            os.write(fd, line.encode())
        except OSError as e:
            li = spec.listener
            raise OperationFailed(
                f"connect to {spec.nqn} at {li.trtype} {li.traddr}:{li.trsvcid} as {spec.host_nqn} "
                f"failed: {e.strerror} (refused, unreachable or not allowed; see the kernel log)"
            ) from None
        finally:
            os.close(fd)

    def detach(self, nqn: str) -> None:
        check_nqn(nqn)
        ctrls = controllers_of(self.controllers(), nqn)
        if not ctrls:
            return
        users = [d for d in self.disks() if d.subsys_nqn == nqn and d.holders]
        if users:
            d = users[0]
            raise OperationFailed(
                f"/dev/{d.name} of {nqn} is in use by {', '.join(d.holders)}; "
                "take it out of the mirror first",
                field="nqn",
            )
        for c in ctrls:
            try:
                (self.sys_nvme / c.name / "delete_controller").write_text("1")
            except FileNotFoundError:
                continue  # went away by itself meanwhile
            except OSError as e:
                raise OperationFailed(
                    f"could not delete controller {c.name} of {nqn}: {e.strerror}"
                ) from None

    def cut(self, nqn: str) -> None:
        """Delete the controllers to `nqn` even while a mirror holds its device: I/O blocked on
        them (no fast-fail, no ctrl loss) fails and the device goes. Waits for the kernel, which
        finishes a reconnect attempt first (one SYN retry with nvme-tcp: a few seconds)."""
        check_nqn(nqn)
        for c in controllers_of(self.controllers(), nqn):
            try:
                (self.sys_nvme / c.name / "delete_controller").write_text("1")
            except FileNotFoundError:
                continue
            except OSError as e:
                raise OperationFailed(
                    f"could not delete controller {c.name} of {nqn}: {e.strerror}"
                ) from None

    def bound_loss(self, nqn: str, loss_s: int = LOSS_BOUND_S) -> None:
        """Bound how long the controllers to `nqn` may hold I/O from now on: fail it at once when
        a path is lost (fast_io_fail_tmo 0) and give up reconnecting after `loss_s`
        (ctrl_loss_tmo; a controller reconnecting already stops at its next attempt). Legs are
        attached without either (a leg md drops silently needs a full resync), so this comes
        just before a leg is cut, in case its replica goes first. Both are run-time attributes
        of nvme-fabrics controllers (Linux >= 5.13); where one cannot be written the cut that
        follows still fails the I/O."""
        check_nqn(nqn)
        for c in controllers_of(self.controllers(), nqn):
            for attr, value in (("fast_io_fail_tmo", "0"), ("ctrl_loss_tmo", str(loss_s))):
                with contextlib.suppress(OSError):
                    (self.sys_nvme / c.name / attr).write_text(value)

    def remotes(self) -> list[RemoteInfo]:
        return remote_infos(self.controllers(), self.disks())

    def rescan(self, nqn: str, min_bytes: int, timeout_s: float = 30.0) -> str:
        """The namespace of `nqn` seen at `min_bytes` or more: its target grew it and sent a
        namespace-changed event; a rescan of each controller makes sure it is read again."""
        check_nqn(nqn)
        deadline = time.monotonic() + timeout_s
        for c in controllers_of(self.controllers(), nqn):
            with contextlib.suppress(OSError):  # reconnecting or gone: the wait below says so
                (self.sys_nvme / c.name / "rescan_controller").write_text("1")
        while True:
            dev = next((r.device for r in self.remotes() if r.nqn == nqn and r.device), None)
            size = (
                int(read_attr(self.sys_block / os.path.basename(dev) / "size", "0") or 0) * 512 if dev else 0
            )
            if dev is not None and size >= min_bytes:
                return dev
            if time.monotonic() > deadline:
                raise OperationFailed(
                    f"{nqn}: the namespace shows {size} bytes, not {min_bytes}, within {timeout_s:.0f} s "
                    f"({dev or 'no device'})",
                    field="nqn",
                )
            self.sleep(0.2)

    def require_device(self, nqn: str) -> str:
        for r in self.remotes():
            if r.nqn == nqn and r.device:
                return r.device
        raise NotFound(f"no attached namespace of {nqn}", field="nqn")
