"""The kernel data plane's re-export (a restart's reconcile): the LVs listed once for every export
(not one `lvs` a volume), and an export whose LV is gone is reported without stopping the others."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeos.dataplane.base import ExportSpec, Listener
from nodeos.dataplane.kernel import lvm
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.errors import NotFound


class NoLvs(lvm.LvmRunner):
    """LVM on a node whose volumes are gone: every listing empty; the commands recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[str] = []

    def run(self, cmd: Sequence[str]) -> str:
        self.ran.append(cmd[0])
        return '{"report": [{"lv": []}]}'


def _spec(vol: str) -> ExportSpec:
    uuid = f"00000000-0000-4000-8000-00000000000{vol[-1]}"
    return ExportSpec(
        nqn=f"nqn.2014-08.io.nodeos:vol:{uuid}",
        serial=f"NODEOS000{vol[-1]}",
        pool_id="p1",
        vol_id=vol,
        uuid=uuid,
        nguid=uuid.replace("-", ""),
        listeners=(Listener("tcp", "198.18.0.1", "4420"),),
    )


def test_every_export_is_tried_against_one_listing_and_the_first_error_raised(tmp_path: Path) -> None:
    (tmp_path / "subsystems").mkdir()
    (tmp_path / "ports").mkdir()
    runner = NoLvs()
    dp = KernelDataPlane(configfs=ConfigFs(tmp_path), runner=runner)
    with pytest.raises(NotFound, match="'v1'") as e:
        dp.reapply_exports([_spec("v1"), _spec("v2")])
    assert e.value.field == "vol_id"
    assert runner.ran == ["lvs"]  # one listing for both, each reported against it
    with pytest.raises(NotFound, match="'v2'"):
        dp.apply_export(_spec("v2"))  # one export alone: its own lookup, the same error
    assert runner.ran == ["lvs", "lvs"]
    assert list((tmp_path / "subsystems").iterdir()) == []  # nothing made for a missing volume
