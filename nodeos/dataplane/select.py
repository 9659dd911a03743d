"""Choosing the data plane: `spdk`, `kernel`, `none` (witness) or `auto`.

auto (the default, `auto_choice`): SPDK when its RPC socket answers; else SPDK when the image
carries the target (`/usr/bin/nvmf_tgt`) and the node has NVMe drives (PCI class 01:08:02, bound
to `nvme` or already handed to SPDK), even while the target does not answer yet: the data plane
watch then shows it DOWN rather than the node silently running a kernel target beside drives
meant for SPDK; else the kernel target when nvmet configfs is usable, else a clear error saying
what is missing. An operator pins one with `dataplane = "spdk" | "kernel"` in nodeosd.toml.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

from nodeos.dataplane.base import (
    AnaState,
    DataPlane,
    ExportInfo,
    ExportSpec,
    MadeVolume,
    NewVolume,
    PoolInfo,
    VolumeInfo,
)
from nodeos.dataplane.kernel.configfs import NVMET_ROOT, ConfigFs
from nodeos.dataplane.no_mirrors import NoMirrors
from nodeos.errors import BadInput, EnvironmentProblem, NodeosError, NotSupported

DEFAULT_SPDK_SOCKET = "/var/tmp/spdk.sock"
BACKENDS = ("auto", "spdk", "kernel", "none")
# Where an image built with SPDK (docs/image.md) has its target; systemd/nodeos-spdk.service runs it.
SPDK_TARGET = Path("/usr/bin/nvmf_tgt")
PCI_DEVICES = Path("/sys/bus/pci/devices")
NVME_CLASS = "0x010802"  # mass storage, non-volatile memory, NVM Express


def nvme_drives(pci_devices: Path = PCI_DEVICES) -> list[str]:
    """PCI addresses of the node's NVMe functions, whatever driver holds them (nvme, vfio-pci,
    uio_pci_generic: a drive already claimed for SPDK still counts)."""
    out: list[str] = []
    for dev in sorted(pci_devices.glob("*")) if pci_devices.is_dir() else []:
        try:
            if (dev / "class").read_text().strip().lower() == NVME_CLASS:
                out.append(dev.name)
        except OSError:
            continue
    return out


def auto_choice(
    spdk_answering: bool, spdk_target: bool, drives: Sequence[str], socket_path: str = DEFAULT_SPDK_SOCKET
) -> tuple[str, str]:
    """What `auto` runs: (backend, why). Pure. `spdk_target`: the image carries nvmf_tgt;
    `drives`: the node's NVMe PCI functions."""
    if spdk_answering:
        return "spdk", f"auto: SPDK answers on {socket_path}"
    if spdk_target and drives:
        n = len(drives)
        return "spdk", (
            f"auto: the image carries SPDK ({SPDK_TARGET}) and the node has {n} NVMe drive"
            f"{'s' if n != 1 else ''} ({', '.join(drives[:4])}{', ...' if n > 4 else ''})"
        )
    if spdk_target:
        return "kernel", "auto: the image carries SPDK but the node has no NVMe drive: kernel target"
    return "kernel", "auto: no SPDK target in the image: kernel target"


def spdk_running(sock_path: str) -> bool:
    """False only when no SPDK target can be running behind the socket: no socket file, or
    nothing listening on it (connection refused). A target that is up but slow to answer
    (its RPC thread busy) is running: its reactors may still serve I/O."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2.0)
            s.connect(sock_path)
    except (FileNotFoundError, ConnectionRefusedError):
        return False
    except OSError:
        return True  # a timeout, a permission: something is there
    return True


def spdk_answers(sock_path: str, timeout_s: float = 2.0) -> bool:
    """True when something on the socket answers spdk_get_version as SPDK would."""
    if not Path(sock_path).exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(sock_path)
            s.sendall(json.dumps({"jsonrpc": "2.0", "method": "spdk_get_version", "id": 1}).encode())
            buf = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                buf += chunk
                try:
                    reply = json.loads(buf)
                except ValueError:
                    continue
                return isinstance(reply, dict) and "version" in (reply.get("result") or {})
    except (OSError, ValueError):
        return False


def choose(
    backend: str = "auto",
    spdk_socket: str = DEFAULT_SPDK_SOCKET,
    configfs_root: Path = NVMET_ROOT,
    state_dir: Path | None = None,
    spdk_target: Path = SPDK_TARGET,
    pci_devices: Path = PCI_DEVICES,
) -> DataPlane:
    return choose_why(backend, spdk_socket, configfs_root, state_dir, spdk_target, pci_devices)[0]


def choose_why(
    backend: str = "auto",
    spdk_socket: str = DEFAULT_SPDK_SOCKET,
    configfs_root: Path = NVMET_ROOT,
    state_dir: Path | None = None,
    spdk_target: Path = SPDK_TARGET,
    pci_devices: Path = PCI_DEVICES,
) -> tuple[DataPlane, str]:
    """The data plane and why it was chosen (`nodeos status` shows the reason)."""
    if backend not in BACKENDS:
        raise BadInput(f"data plane {backend!r} is unknown", field="dataplane", allowed=list(BACKENDS))
    if backend == "none":
        return NoDataPlane(), "witness (dataplane none)"
    why = f"pinned: dataplane {backend}"
    if backend == "auto":
        answering = spdk_answers(spdk_socket)
        target = spdk_target.exists()
        drives = nvme_drives(pci_devices) if target else []
        backend, why = auto_choice(answering, target, drives, spdk_socket)
        if backend == "kernel" and not ConfigFs(configfs_root).usable():
            backend = "auto"  # neither: the error below says what is missing
    if backend == "spdk":
        from nodeos.dataplane.spdk.backend import SpdkDataPlane

        if state_dir is None:
            return SpdkDataPlane(spdk_socket), why
        # DH-HMAC-CHAP key files are secrets: they live under the daemon's own (0700) state dir.
        return SpdkDataPlane(spdk_socket, keys_dir=Path(state_dir) / "spdk-keys"), why
    fs = ConfigFs(configfs_root)
    if backend == "kernel":
        from nodeos.dataplane.kernel.backend import KernelDataPlane

        fs.require()
        return KernelDataPlane(configfs=fs), why
    raise EnvironmentProblem(
        f"no data plane available: SPDK does not answer on {spdk_socket} and the kernel target "
        f"is not usable ({configfs_root} missing: modprobe nvmet). Start nvmf_tgt, load nvmet, "
        "or run as a witness with --dataplane none"
    )


class NoDataPlane(NoMirrors):
    """The witness node's data plane: it stores no data and refuses every change clearly."""

    name = "none"
    _WHY = "this node runs without a data plane (witness): it holds no drives, pools or volumes"

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "transports": [], "qos": False, "witness": True}

    def _refuse(self) -> NotSupported:
        return NotSupported(self._WHY, field="dataplane")

    def create_pool(self, pool_id: str, devices: list[str]) -> PoolInfo:
        raise self._refuse()

    def delete_pool(self, pool_id: str) -> None:
        raise self._refuse()

    def list_pools(self) -> list[PoolInfo]:
        return []

    def create_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo:
        raise self._refuse()

    def create_volumes(
        self, wanted: Sequence[NewVolume], made: Callable[[], None] | None = None
    ) -> list[MadeVolume | NodeosError]:
        return [self._refuse() for _ in wanted]

    def resize_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> VolumeInfo:
        raise self._refuse()

    def delete_volume(self, pool_id: str, vol_id: str) -> None:
        raise self._refuse()

    def snapshot_volume(self, pool_id: str, vol_id: str, snap_id: str) -> VolumeInfo:
        raise self._refuse()

    def clone_snapshot(self, pool_id: str, snap_id: str, new_vol_id: str) -> VolumeInfo:
        raise self._refuse()

    def list_volumes(self, pool_id: str | None = None) -> list[VolumeInfo]:
        return []

    def apply_export(self, spec: ExportSpec) -> ExportInfo:
        raise self._refuse()

    def reapply_exports(self, specs: Sequence[ExportSpec]) -> None:
        if specs:
            raise self._refuse()

    def revoke_hosts(self, nqn: str, keep: Sequence[str]) -> list[str]:
        raise self._refuse()

    def remove_export(self, nqn: str) -> None:
        raise self._refuse()

    def list_exports(self) -> list[ExportInfo]:
        return []

    def export_info(self, nqn: str) -> ExportInfo | None:
        return None

    def set_ana_state(self, nqn: str, ana_group: int, state: AnaState) -> None:
        raise self._refuse()

    def fence_export(self, nqn: str, drop_hosts: bool = False) -> bool:
        return False  # a witness exports nothing
