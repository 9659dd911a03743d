"""A demoted primary back from a power-off wipes its leg's md superblock before anything exports
the leg, and after the boot its LV may be inactive (the lab, 2026-12-02: the TLS failover test's
old primary retried `volume.demote` every 30 s on "leg device /dev/nodeos_p.../v_v... is
missing"). The wipe activates one of our LVs first, as an export does; a path that is not ours,
or an LV that is gone, is still the error it was."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeos.dataplane.kernel import lvm
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.errors import NotFound

POOL, VOL = "p1", "9ac0e8e0dc484ddf97c6b870234111bd"
LEG = f"/dev/{lvm.vg_name(POOL)}/{lvm.lv_name(VOL)}"


class InactiveLv(lvm.LvmRunner):
    """LVM holding one thin LV, inactive until `lvchange -ay`; the commands recorded."""

    def __init__(self, exists: bool = True) -> None:
        super().__init__(reuse_s=0)
        self.exists, self.active = exists, False
        self.ran: list[list[str]] = []

    def run(self, cmd: Sequence[str]) -> str:
        self.ran.append(list(cmd))
        if cmd[0] == "lvchange":
            self.active = True
            return ""
        rows = []
        if self.exists:
            rows.append(
                {
                    "vg_name": lvm.vg_name(POOL),
                    "lv_name": lvm.lv_name(VOL),
                    "lv_size": str(64 << 20),
                    "lv_tags": lvm.KIND_TAG + "volume",
                    "lv_attr": "Vwi-a-tz--" if self.active else "Vwi---tz--",
                    "pool_lv": lvm.THIN_POOL,
                    "lv_path": LEG,
                }
            )
        return json.dumps({"report": [{"lv": rows}]})


def _dp(tmp_path: Path, runner: InactiveLv, wiped: list[str]) -> KernelDataPlane:
    (tmp_path / "subsystems").mkdir(exist_ok=True)
    (tmp_path / "ports").mkdir(exist_ok=True)
    dp = KernelDataPlane(configfs=ConfigFs(tmp_path), runner=runner)
    dp.mirrors.wipe_member = wiped.append  # type: ignore[method-assign]  # md itself is not here
    return dp


def test_an_inactive_leg_is_activated_before_its_superblock_is_wiped(tmp_path: Path) -> None:
    runner, wiped = InactiveLv(), []
    _dp(tmp_path, runner, wiped).wipe_mirror_member(LEG)
    activations = [c for c in runner.ran if c[0] == "lvchange"]
    assert activations and activations[0][-1] == f"{lvm.vg_name(POOL)}/{lvm.lv_name(VOL)}", runner.ran
    assert "-ay" in activations[0]
    assert wiped == [LEG]


def test_a_leg_whose_lv_is_gone_is_not_activated_and_the_wipe_decides(tmp_path: Path) -> None:
    runner, wiped = InactiveLv(exists=False), []
    _dp(tmp_path, runner, wiped).wipe_mirror_member(LEG)
    assert not [c for c in runner.ran if c[0] == "lvchange"]
    assert wiped == [LEG]


def test_only_our_lv_paths_are_read_as_pool_and_volume() -> None:
    assert lvm.ids_of_path(LEG) == (POOL, VOL)
    for other in (
        "/dev/md/x",
        "/dev/nvme0n1",
        f"/dev/vg0/{lvm.lv_name(VOL)}",
        "/dev/nodeos_p1/tpool",
        "rel/x/y",
    ):
        assert lvm.ids_of_path(other) is None, other


def test_the_md_wipe_still_refuses_a_missing_device() -> None:
    from nodeos.dataplane.kernel.mirror import MdMirrors

    with pytest.raises(NotFound, match="missing"):
        MdMirrors.wipe_member(object.__new__(MdMirrors), LEG)
