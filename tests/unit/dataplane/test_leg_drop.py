"""Dropping a blocked leg on the kernel data plane (sysfs edges over a directory tree shaped like
/sys): md marks the leg faulty without the caller waiting on md's lock for ever, and the leg's
controllers are deleted even while md holds its device."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nodeos.dataplane import mirror_names as mn
from nodeos.dataplane.base import RemoteSpec
from nodeos.dataplane.kernel import initiator as ini
from nodeos.dataplane.kernel import mirror as md

VOL = "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"


def test_replica_legs_block_on_a_lost_path_instead_of_failing() -> None:
    spec = RemoteSpec(mn.replica_nqn(VOL, "2"), None, "h", "u", "0" * 32)  # type: ignore[arg-type]
    assert (spec.ctrl_loss_tmo, spec.fast_io_fail_tmo) == (-1, -1)


def _sys_nvme(root: Path, nqn: str, state: str) -> tuple[Path, Path]:
    sys_nvme, sys_block = root / "class", root / "block"
    c = sys_nvme / "nvme3"
    c.mkdir(parents=True)
    for k, v in {"subsysnqn": nqn, "transport": "tcp", "address": "traddr=10.0.0.2,trsvcid=4420"}.items():
        (c / k).write_text(v + "\n")
    (c / "state").write_text(state + "\n")
    (c / "delete_controller").write_text("")
    disk = sys_block / "nvme3n1"
    (disk / "holders" / "md127").mkdir(parents=True)
    (disk / "device").mkdir()
    (disk / "device" / "subsysnqn").write_text(nqn + "\n")
    return sys_nvme, sys_block


def test_a_blocked_legs_controller_is_deleted_even_while_md_holds_its_device(tmp_path: Path) -> None:
    nqn = mn.replica_nqn(VOL, "2")
    sys_nvme, sys_block = _sys_nvme(tmp_path, nqn, "connecting")
    i = ini.Initiator(fabrics=tmp_path / "fab", sys_nvme=sys_nvme, sys_block=sys_block)
    try:
        i.detach(nqn)
        raise AssertionError("detach must refuse a device md holds")
    except ini.OperationFailed as e:
        assert "in use by md127" in e.message
    i.cut(nqn)
    assert (sys_nvme / "nvme3" / "delete_controller").read_text() == "1"
    i.cut(mn.replica_nqn(VOL, "3"))  # nothing attached: nothing to do


def _md(root: Path, member: str, state_fifo: bool = False) -> Path:
    dev = root / "md127" / "md" / f"dev-{member}"
    dev.mkdir(parents=True)
    (root / "md127" / "md" / "uuid").write_text(mn.mirror_uuid(mn.mirror_id_for(VOL)) + "\n")
    if state_fifo:
        os.mkfifo(dev / "state")  # a write that never returns: md's lock held by a stuck write
    else:
        (dev / "state").write_text("in_sync\n")
    return dev


def test_md_marks_the_blocked_leg_faulty(tmp_path: Path) -> None:
    dev = _md(tmp_path, "nvme3n1")
    mirrors = md.MdMirrors(sys_block=tmp_path)
    assert mirrors.fail_member(mn.mirror_id_for(VOL), "/dev/nvme3n1")
    assert (dev / "state").read_text() == "faulty"
    assert not mirrors.fail_member(mn.mirror_id_for(VOL), "/dev/nvme9n1")  # not a member


def test_marking_faulty_never_waits_longer_than_its_bound(tmp_path: Path) -> None:
    _md(tmp_path, "nvme3n1", state_fifo=True)
    t = time.monotonic()
    assert not md.MdMirrors(sys_block=tmp_path).fail_member(mn.mirror_id_for(VOL), "/dev/nvme3n1", wait_s=0.3)
    assert time.monotonic() - t < 2.0
    # let the parked writer go
    fd = os.open(tmp_path / "md127" / "md" / "dev-nvme3n1" / "state", os.O_RDONLY | os.O_NONBLOCK)
    os.close(fd)


def _leg(sys_nvme: Path, sys_block: Path, n: int, nqn: str, state: str) -> None:
    c = sys_nvme / f"nvme{n}"
    c.mkdir(parents=True)
    for k, v in {"subsysnqn": nqn, "transport": "tcp", "address": f"traddr=10.0.0.{n},trsvcid=4420"}.items():
        (c / k).write_text(v + "\n")
    (c / "state").write_text(state + "\n")
    for k, v in {"delete_controller": "", "fast_io_fail_tmo": "off", "ctrl_loss_tmo": "off"}.items():
        (c / k).write_text(v)
    disk = sys_block / f"nvme{n}n1"
    (disk / "holders" / "md127").mkdir(parents=True)
    (disk / "device").mkdir()
    (disk / "device" / "subsysnqn").write_text(nqn + "\n")


def test_a_mirror_going_away_cuts_every_leg_in_one_round_each_loss_bounded_first(tmp_path: Path) -> None:
    """Issue 25: md's superblock write for one leg's failure held md's lock while it waited on the
    other leg, whose replica had gone; that leg was never cut. Now each leg's loss is bounded
    (fast fail, controller loss) and every leg is failed and cut at once: a leg whose md failure
    blocks (md's lock held) does not keep the other's controller from going."""
    from nodeos.dataplane.kernel.backend import KernelDataPlane

    sys_nvme, sys_block = tmp_path / "class", tmp_path / "block"
    a, b = mn.replica_nqn(VOL, "2"), mn.replica_nqn(VOL, "3")
    _leg(sys_nvme, sys_block, 2, a, "live")
    _leg(sys_nvme, sys_block, 3, b, "connecting")
    md_root = tmp_path / "mdsys"
    _md(md_root, "nvme2n1", state_fifo=True)  # the first leg's failure waits on md's lock
    dev_b = md_root / "md127" / "md" / "dev-nvme3n1"
    dev_b.mkdir(parents=True)
    (dev_b / "state").write_text("in_sync\n")
    dp = KernelDataPlane(
        initiator=ini.Initiator(fabrics=tmp_path / "fab", sys_nvme=sys_nvme, sys_block=sys_block),
        mirrors=md.MdMirrors(sys_block=md_root),
    )
    t = time.monotonic()
    assert sorted(dp.cut_mirror_legs(mn.mirror_id_for(VOL), [a, b, mn.replica_nqn(VOL, "4")])) == sorted(
        [a, b]
    )
    assert time.monotonic() - t < 10  # md's wait for its lock is bounded (FAIL_WAIT_S), not for ever
    for n in (2, 3):
        c = sys_nvme / f"nvme{n}"
        assert (c / "fast_io_fail_tmo").read_text() == "0"
        assert (c / "ctrl_loss_tmo").read_text() == str(ini.LOSS_BOUND_S)
        assert (c / "delete_controller").read_text() == "1"
    assert (dev_b / "state").read_text() == "faulty"
    fd = os.open(md_root / "md127" / "md" / "dev-nvme2n1" / "state", os.O_RDONLY | os.O_NONBLOCK)
    os.close(fd)
