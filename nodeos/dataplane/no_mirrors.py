"""Mirror methods of a backend that has none yet (SPDK) or never will (witness): each change
is refused with a clear NotSupported, each list is empty, so callers see why, not a crash."""

from __future__ import annotations

from collections.abc import Sequence

from nodeos.dataplane.base import (
    NO_MIRROR_CAPS,
    Listener,
    MirrorCaps,
    MirrorInfo,
    MirrorSpec,
    RemoteInfo,
    RemoteSpec,
)
from nodeos.errors import NotSupported


class NoMirrors:
    name: str
    mirror_caps: MirrorCaps = NO_MIRROR_CAPS

    def _no_mirrors(self, field: str) -> NotSupported:
        return NotSupported(
            f"mirrors over the fabric are not supported by the {self.name} data plane", field=field
        )

    def attach_remote(self, spec: RemoteSpec) -> str:
        raise self._no_mirrors("nqn")

    def detach_remote(self, nqn: str) -> None:
        raise self._no_mirrors("nqn")

    def list_remotes(self) -> list[RemoteInfo]:
        return []

    def drop_mirror_leg(self, mirror_id: str, nqn: str) -> None:
        raise self._no_mirrors("mirror_id")

    def cut_mirror_legs(self, mirror_id: str, nqns: Sequence[str]) -> list[str]:
        raise self._no_mirrors("mirror_id")

    def assemble_mirror(self, spec: MirrorSpec) -> MirrorInfo:
        raise self._no_mirrors("mirror_id")

    def stop_mirror(self, mirror_id: str) -> None:
        raise self._no_mirrors("mirror_id")

    def prepare_mirror_freeze(self, mirror_id: str) -> None:
        raise self._no_mirrors("mirror_id")

    def freeze_mirror_writes(self, mirror_id: str) -> None:
        raise self._no_mirrors("mirror_id")

    def grow_mirror(self, mirror_id: str, size_bytes: int) -> MirrorInfo:
        raise self._no_mirrors("size")

    def rescan_remote(self, nqn: str, min_bytes: int) -> str:
        raise self._no_mirrors("size")

    def revalidate_export(self, nqn: str) -> None:
        raise self._no_mirrors("size")

    def thaw_mirror_writes(self, mirror_id: str) -> None:
        raise self._no_mirrors("mirror_id")

    def read_and_thaw_mirror(self, mirror_id: str) -> MirrorInfo | None:
        raise self._no_mirrors("mirror_id")

    def mirror_writes_frozen(self, mirror_id: str) -> bool:
        return False

    def mirror_status(self, mirror_id: str) -> MirrorInfo | None:
        return None

    def list_mirrors(self) -> list[MirrorInfo]:
        return []

    def ensure_view(self, view_id: str, device: str, offset_bytes: int, size_bytes: int) -> str:
        raise self._no_mirrors("view_id")

    def remove_view(self, view_id: str) -> None:
        raise self._no_mirrors("view_id")

    def set_referrals(self, port: Listener, referrals: tuple[Listener, ...]) -> None:
        raise self._no_mirrors("referrals")

    def list_referrals(self, port: Listener) -> list[Listener]:
        return []
