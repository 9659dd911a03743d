"""Choosing the data plane: `spdk`, `kernel`, `none` (witness) or `auto`.

auto: SPDK when its RPC socket answers, else the kernel target when nvmet configfs is
usable, else a clear error saying what is missing.
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
) -> DataPlane:
    if backend not in BACKENDS:
        raise BadInput(f"data plane {backend!r} is unknown", field="dataplane", allowed=list(BACKENDS))
    if backend == "none":
        return NoDataPlane()
    if backend == "spdk" or (backend == "auto" and spdk_answers(spdk_socket)):
        from nodeos.dataplane.spdk.backend import SpdkDataPlane

        if state_dir is None:
            return SpdkDataPlane(spdk_socket)
        # DH-HMAC-CHAP key files are secrets: they live under the daemon's own (0700) state dir.
        return SpdkDataPlane(spdk_socket, keys_dir=Path(state_dir) / "spdk-keys")
    fs = ConfigFs(configfs_root)
    if backend == "kernel" or fs.usable():
        from nodeos.dataplane.kernel.backend import KernelDataPlane

        if backend == "kernel":
            fs.require()
        return KernelDataPlane(configfs=fs)
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
