"""A replica's LV left on a node from before its drive was pulled (its record went with the drive,
the LV came back with it) while the volume grew: the soak of 2026-11-30 saw the new replica's
create refused ("already exists with size 41943040"), and every retry with it. The create now
grows it, as a resize would; a snapshot of the same id is still refused."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeos.dataplane.kernel import lvm
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.errors import AlreadyExists

POOL, VOL = "p1", "0595d6da970f4277833f61712f614914"
MIB = 1 << 20


class OneLv(lvm.LvmRunner):
    """LVM holding a thin pool and one LV; lvextend changes its size; the commands recorded."""

    def __init__(self, size: int, kind: str = "volume") -> None:
        super().__init__(reuse_s=0)
        self.size, self.kind = size, kind
        self.ran: list[str] = []

    def run(self, cmd: Sequence[str]) -> str:
        self.ran.append(cmd[0])
        if cmd[0] == "lvextend":
            self.size = int(cmd[cmd.index("-L") + 1].rstrip("b"))
            return ""
        vg = lvm.vg_name(POOL)
        rows = [
            {"vg_name": vg, "lv_name": lvm.THIN_POOL, "lv_size": str(1 << 30), "lv_attr": "twi-a-tz--"},
            {
                "vg_name": vg,
                "lv_name": lvm.lv_name(VOL),
                "lv_size": str(self.size),
                "lv_tags": lvm.KIND_TAG + self.kind,
                "lv_attr": "Vwi-a-tz--",
                "pool_lv": lvm.THIN_POOL,
                "lv_path": f"/dev/{vg}/{lvm.lv_name(VOL)}",
            },
        ]
        return json.dumps({"report": [{"lv": rows}]})


def _dp(tmp_path: Path, runner: OneLv) -> KernelDataPlane:
    (tmp_path / "subsystems").mkdir(exist_ok=True)
    (tmp_path / "ports").mkdir(exist_ok=True)
    return KernelDataPlane(configfs=ConfigFs(tmp_path), runner=runner)


def test_a_smaller_leftover_lv_is_grown_by_the_create(tmp_path: Path) -> None:
    runner = OneLv(40 * MIB)
    info = _dp(tmp_path, runner).create_volume(POOL, VOL, 56 * MIB)
    assert info.size_bytes == 56 * MIB and runner.ran.count("lvextend") == 1
    assert "lvcreate" not in runner.ran
    # the same size again (a retried create): nothing run but reads
    again = _dp(tmp_path, runner).create_volume(POOL, VOL, 56 * MIB)
    assert again.size_bytes == 56 * MIB and runner.ran.count("lvextend") == 1


def test_a_snapshot_of_the_same_id_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(AlreadyExists) as ei:
        _dp(tmp_path, OneLv(40 * MIB, "snapshot")).create_volume(POOL, VOL, 40 * MIB)
    assert ei.value.field == "vol_id"
