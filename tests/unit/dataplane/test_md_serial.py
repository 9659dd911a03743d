"""md's write serialization on the kernel data plane's mirrors (md_serial.py): every assembled
mirror has it on before it is exported, a kernel without it is refused, and a leg added to a
running serialized mirror is added with the writes held and the policy off, then on again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodeos.dataplane import mirror_names as mn
from nodeos.dataplane.base import MirrorSpec
from nodeos.dataplane.kernel import md_commands as mdc
from nodeos.dataplane.kernel import md_serial
from nodeos.dataplane.kernel import mirror as md
from nodeos.errors import EnvironmentProblem, OperationFailed

VOL = "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"
MIB = 1024 * 1024
MID = mn.mirror_id_for(VOL)


def spec(*members: str) -> MirrorSpec:
    return MirrorSpec(
        mirror_id=MID,
        members=members or ("/dev/nodeos_p1/v_x", "/dev/nvme9n1"),
        size_bytes=64 * MIB,
        data_offset_bytes=mn.MIRROR_DATA_OFFSET,
        create=False,
    )


def running_array(sys_block: Path, serialize: str | None = "0") -> Path:
    """/sys/block/md127 of a running 2-leg raid1 whose legs are not listed (the test adds them)."""
    mdd = sys_block / "md127" / "md"
    mdd.mkdir(parents=True)
    (sys_block / "md127" / "size").write_text(f"{64 * MIB // 512}\n")
    attrs = {
        "uuid": mn.mirror_uuid(MID),
        "array_state": "clean",
        "raid_disks": "2",
        "degraded": "0",
        "sync_action": "idle",
        "sync_completed": "none",
        "suspend_lo": "0",
        "suspend_hi": "0",
    }
    if serialize is not None:
        attrs[md_serial.SERIALIZE_ATTR] = serialize
    for k, v in attrs.items():
        (mdd / k).write_text(v + "\n")
    return mdd


def no_mdadm(cmd: list[str], timeout_s: float = 0, check: bool = True) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"unexpected command {cmd}")


def test_only_one_reads_as_serialized() -> None:
    assert md_serial.writes_serialized("1\n")
    for text in ("0\n", "n/a\n", ""):  # off, not raid1, no such attribute (Linux < 5.8)
        assert not md_serial.writes_serialized(text)


def test_assembling_a_mirror_turns_write_serialization_on(tmp_path: Path) -> None:
    mdd = running_array(tmp_path)
    info = md.MdMirrors(sys_block=tmp_path, runner=no_mdadm).assemble(spec())
    assert info.size_bytes == 64 * MIB
    assert (mdd / md_serial.SERIALIZE_ATTR).read_text().strip() == "1"
    # Again: nothing to do (md keeps it while the array runs).
    md.MdMirrors(sys_block=tmp_path, runner=no_mdadm).assemble(spec())
    assert (mdd / md_serial.SERIALIZE_ATTR).read_text().strip() == "1"


def test_a_kernel_without_write_serialization_is_refused_so_the_mirror_is_not_exported(
    tmp_path: Path,
) -> None:
    running_array(tmp_path, serialize=None)
    with pytest.raises(EnvironmentProblem, match="serialize_policy is missing"):
        md.MdMirrors(sys_block=tmp_path, runner=no_mdadm).assemble(spec())


def test_md_refusing_write_serialization_fails_the_assembly(tmp_path: Path) -> None:
    mdd = running_array(tmp_path, serialize=None)
    (mdd / md_serial.SERIALIZE_ATTR).mkdir()  # any store fails (as md's EINVAL for a non-raid1 array)
    with pytest.raises(OperationFailed) as e:
        md.MdMirrors(sys_block=tmp_path, runner=no_mdadm).assemble(spec())
    assert e.value.field == "mirror_id"


def test_a_leg_joins_a_serialized_mirror_with_writes_held_and_the_policy_off(tmp_path: Path) -> None:
    mdd = running_array(tmp_path, serialize="1")
    seen: list[tuple[str, str, str]] = []

    def mdadm(cmd: list[str], timeout_s: float = 0, check: bool = True) -> subprocess.CompletedProcess[str]:
        frozen = mdc.writes_frozen(
            (mdd / "suspend_lo").read_text().strip(), (mdd / "suspend_hi").read_text().strip()
        )
        seen.append(
            (cmd[2], "frozen" if frozen else "flowing", (mdd / "serialize_policy").read_text().strip())
        )
        return subprocess.CompletedProcess(cmd, 0, "", "")

    md.MdMirrors(sys_block=tmp_path, runner=mdadm).assemble(spec("/dev/nodeos_p1/v_x", "/dev/null"))
    assert seen == [("--re-add", "frozen", "0")]  # /dev/null: a leg device that exists
    assert (mdd / "serialize_policy").read_text().strip() == "1"
    assert not md.MdMirrors(sys_block=tmp_path).writes_frozen(MID)


def test_a_failed_add_still_leaves_the_mirror_serialized_and_its_writes_flowing(tmp_path: Path) -> None:
    mdd = running_array(tmp_path, serialize="1")

    def mdadm(cmd: list[str], timeout_s: float = 0, check: bool = True) -> subprocess.CompletedProcess[str]:
        if check:
            raise OperationFailed(f"{cmd[2]} failed")
        return subprocess.CompletedProcess(cmd, 1, "", "no")

    with pytest.raises(OperationFailed, match="--add failed"):
        md.MdMirrors(sys_block=tmp_path, runner=mdadm).assemble(spec("/dev/nodeos_p1/v_x", "/dev/null"))
    assert (mdd / "serialize_policy").read_text().strip() == "1"
    assert not md.MdMirrors(sys_block=tmp_path).writes_frozen(MID)


def test_a_leg_joining_during_a_snapshots_freeze_leaves_the_freeze_in_place(tmp_path: Path) -> None:
    mdd = running_array(tmp_path, serialize="1")
    mirrors = md.MdMirrors(sys_block=tmp_path, runner=lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0))
    mirrors.freeze_writes(MID)
    mirrors.assemble(spec("/dev/nodeos_p1/v_x", "/dev/null"))
    assert mirrors.writes_frozen(MID)  # the snapshot thaws it, not the rejoin
    assert (mdd / "serialize_policy").read_text().strip() == "1"
