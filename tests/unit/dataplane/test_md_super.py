"""Listing md mirrors never runs `mdadm --detail` on an array whose remote leg holds its I/O.

Found in the lab (2026-11-26): with a secondary's VM powered off, the primary's orphan scan ran
`mdadm --detail`, which reads every member's superblock and hung 120 s on the dead leg, twice,
holding the data plane queue; the leg was taken out of md only when the VM came back and the
host's I/O waited 231 s. The name is now read from the superblock on the node's own member."""

from __future__ import annotations

import struct
import subprocess
import uuid as uuidlib
from pathlib import Path

import pytest

from nodeos.dataplane import mirror_names as mn
from nodeos.dataplane.kernel import md_super
from nodeos.dataplane.kernel import mirror as md
from nodeos.errors import OperationFailed

VOL = "6f1c1d52-7a8e-4b1e-9d60-0a4f1a2b3c4d"


def superblock(name: str, array_uuid: str, magic: int = md_super.SUPER_MAGIC) -> bytes:
    sb = bytearray(4096)
    struct.pack_into("<II", sb, 0, magic, 1)
    sb[16:32] = uuidlib.UUID(array_uuid).bytes
    sb[32 : 32 + len(name)] = name.encode()
    return bytes(sb)


def test_the_name_is_read_from_a_version_1_superblock_of_this_array_only() -> None:
    mid = mn.mirror_id_for(VOL)
    u = mn.mirror_uuid(mid)
    assert md_super.parse_name(superblock(mid, u), u) == mid
    assert md_super.parse_name(superblock(mid, u), u.replace("-", ":")) == mid  # md's own spelling
    other = mn.mirror_uuid(mn.mirror_id_for("00000000-0000-4000-8000-000000000000"))
    assert md_super.parse_name(superblock(mid, u), other) is None  # a stale superblock of another array
    assert md_super.parse_name(superblock(mid, u, magic=0), u) is None
    assert md_super.parse_name(b"\0" * 10, u) is None


def _array(root: Path, kname: str, array_uuid: str, members: dict[str, str]) -> None:
    """sysfs of md array kname with {member block name: its md state}; dev files under root/dev."""
    sys_block = root / "sys"
    mdd = sys_block / kname / "md"
    mdd.mkdir(parents=True)
    (mdd / "uuid").write_text(array_uuid + "\n")
    (mdd / "array_state").write_text("active\n")
    (mdd / "raid_disks").write_text(f"{len(members)}\n")
    (sys_block / kname / "size").write_text("131072\n")
    for slot, (member, state) in enumerate(members.items()):
        (sys_block / member).mkdir(exist_ok=True)
        d = mdd / f"dev-{member}"
        d.mkdir()
        (d / "block").symlink_to(sys_block / member)
        (d / "state").write_text(state + "\n")
        (d / "slot").write_text(f"{slot}\n")
        (d / "offset").write_text("16384\n")


def _nvme(root: Path, member: str, ctrl_state: str) -> None:
    (root / "sys" / member / "device").mkdir(parents=True, exist_ok=True)
    (root / "sys" / member / "device" / "state").write_text(ctrl_state + "\n")


def _no_mdadm(cmd: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"ran {cmd}: it would hang on the held leg")


def test_a_primary_with_a_dead_remote_leg_lists_its_mirror_without_mdadm(tmp_path: Path) -> None:
    mid = mn.mirror_id_for(VOL)
    u = mn.mirror_uuid(mid)
    _array(tmp_path, "md127", u, {"dm-4": "in_sync", "nvme3n1": "in_sync"})
    _nvme(tmp_path, "nvme3n1", "connecting")  # the secondary's VM is off: its I/O is held
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "dm-4").write_bytes(b"\0" * 4096 + superblock(mid, u) + b"\0" * 4096)
    mirrors = md.MdMirrors(sys_block=tmp_path / "sys", dev_dir=dev, runner=_no_mdadm)
    assert [m.mirror_id for m in mirrors.list()] == [mid]


def test_without_a_readable_local_member_a_held_leg_is_an_error_not_a_hang(tmp_path: Path) -> None:
    u = mn.mirror_uuid(mn.mirror_id_for(VOL))
    _array(tmp_path, "md126", u, {"nvme2n1": "in_sync", "nvme3n1": "in_sync"})
    _nvme(tmp_path, "nvme2n1", "live")
    _nvme(tmp_path, "nvme3n1", "resetting")
    (tmp_path / "dev").mkdir()
    mirrors = md.MdMirrors(sys_block=tmp_path / "sys", dev_dir=tmp_path / "dev", runner=_no_mdadm)
    with pytest.raises(OperationFailed) as e:
        mirrors.list()
    assert "md126" in e.value.message and "hang" in e.value.message


def test_with_every_leg_live_and_no_local_member_mdadm_names_the_array(tmp_path: Path) -> None:
    mid = mn.mirror_id_for(VOL)
    u = mn.mirror_uuid(mid)
    _array(tmp_path, "md125", u, {"nvme2n1": "in_sync"})
    _nvme(tmp_path, "nvme2n1", "live")
    (tmp_path / "dev").mkdir()
    ran = []

    def mdadm(cmd: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, f"MD_NAME={mid}\n", "")

    mirrors = md.MdMirrors(sys_block=tmp_path / "sys", dev_dir=tmp_path / "dev", runner=mdadm)
    assert [m.mirror_id for m in mirrors.list()] == [mid]
    assert ran and ran[0][:2] == ["mdadm", "--detail"]


def test_a_missing_legs_superblock_wipe_is_an_error_never_skipped(tmp_path: Path) -> None:
    """A demote (or a new secondary's first export) wipes its leg's superblock so it only ever
    rejoins by a full copy. With the leg's drive pulled the wipe used to find "no superblock"
    and go on; it now fails, and the step is tried again once the device is back."""
    from nodeos.errors import NotFound

    ran: list[list[str]] = []

    def runner(cmd: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "")

    mirrors = md.MdMirrors(sys_block=tmp_path / "sys", dev_dir=tmp_path / "dev", runner=runner)
    with pytest.raises(NotFound) as e:
        mirrors.wipe_member("/dev/nodeos-test-vg/v-missing")
    assert e.value.field == "device" and ran == []
    mirrors.wipe_member("/dev/null")  # present, no superblock (mdadm finds none): nothing to wipe
    assert ran and [c for c in ran if "--zero-superblock" in c] == []
