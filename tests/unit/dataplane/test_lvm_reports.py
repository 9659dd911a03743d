"""LVM report parsers on outputs captured in the lab (data/)."""

from __future__ import annotations

from pathlib import Path

from nodeos.dataplane.kernel import lvm

DATA = Path(__file__).parent / "data"
V1 = "0f3c2a1b9d8e4f70a1b2c3d4e5f60718"
C1 = "7a6b5c4d3e2f40118293a4b5c6d7e8f9"


def test_lvs_thin_pool_volume_snapshot_clone() -> None:
    lvs = {lv.name: lv for lv in lvm.parse_lvs((DATA / "lvs-2.03-thin.json").read_text())}
    assert {"lvol0_pmspare", "tpool", "tpool_tdata", "tpool_tmeta"} <= set(lvs)  # brackets dropped
    tp = lvs["tpool"]
    assert tp.size_bytes == 1006632960 and tp.data_percent == 1.67
    vol, snap, clone = lvs[f"v_{V1}"], lvs["v_snap1"], lvs[f"v_{C1}"]
    assert (vol.kind, vol.origin, vol.active, vol.size_bytes) == ("volume", "", True, 402653184)
    assert vol.path == f"/dev/nodeos_p1/v_{V1}"
    assert (snap.kind, snap.origin, snap.active) == ("snapshot", f"v_{V1}", False)  # skipped at activation
    assert (clone.kind, clone.origin, clone.active) == ("clone", "v_snap1", True)
    ours = [lvm.vol_id_of(lv.name) for lv in lvs.values() if lvm.vol_id_of(lv.name)]
    assert sorted(ours) == sorted([V1, C1, "snap1"])


def test_pvs() -> None:
    assert lvm.parse_pvs((DATA / "pvs-2.03.json").read_text()) == [
        ("/dev/nvme0n1", "nodeos_p1", 532676608),
        ("/dev/nvme1n1", "nodeos_p1", 532676608),
    ]


def test_missing_vg_is_recognised_from_the_json_log() -> None:
    # LVM 2.03 with --reportformat json writes the error into the report, not to stderr.
    out = (DATA / "lvs-2.03-missing-vg.json").read_text()
    e = lvm.LvmError(lvm.cmd_lvs("p1"), 5, "", out)
    assert e.not_found
    assert 'Volume group "nodeos_p1" not found' in e.message
    assert lvm.parse_lvs(out) == []
