"""Pure parts of mirrors over the fabric: names, connect strings, device lookup by NGUID,
md command lines and md sysfs parsing (snapshots captured in the lab, kernel 6.12)."""

from __future__ import annotations

import pytest

from nodeos.dataplane import mirror_names as mn
from nodeos.dataplane.base import Listener, MirrorInfo, MirrorMember, MirrorSpec, RemoteSpec
from nodeos.dataplane.kernel import initiator as ini
from nodeos.dataplane.kernel import md_commands as mdc
from nodeos.dataplane.kernel import mirror as md
from nodeos.dataplane.kernel.nvmet import PortAddr, referral_name
from nodeos.errors import BadInput, NotFound, OperationFailed

VOL = "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"
MIB = 1024 * 1024
HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:79a7e5db-2f5b-5e2e-b921-5c78a8ea97dd"
HOSTID = "79a7e5db-2f5b-5e2e-b921-5c78a8ea97dd"


def remote(**kw: object) -> RemoteSpec:
    base: dict[str, object] = dict(
        nqn=mn.replica_nqn(VOL, "s2"),
        listener=Listener("tcp", "198.19.121.12", "4420"),
        host_nqn=HOSTNQN,
        host_id=HOSTID,
        nguid=mn.replica_ids(VOL, "s2")[1],
    )
    return RemoteSpec(**{**base, **kw})  # type: ignore[arg-type]


def mirror(**kw: object) -> MirrorSpec:
    base: dict[str, object] = dict(
        mirror_id=mn.mirror_id_for(VOL),
        members=("/dev/nodeos_p1/v_x", "/dev/nvme1n1", "/dev/nvme2n1"),
        size_bytes=64 * MIB,
        data_offset_bytes=mn.MIRROR_DATA_OFFSET,
        create=True,
    )
    return MirrorSpec(**{**base, **kw})  # type: ignore[arg-type]


# ---- names --------------------------------------------------------------------------
def test_names_are_fixed_by_volume_and_node() -> None:
    assert mn.volume_nqn(VOL.replace("-", "")) == f"nqn.2014-08.io.nodeos:vol:{VOL}"
    assert mn.replica_nqn(VOL, "s2") == f"nqn.2014-08.io.nodeos:rep:{VOL}:s2"
    u2, g2 = mn.replica_ids(VOL, "s2")
    assert (u2, g2) == mn.replica_ids(VOL.upper(), "s2")  # the same on every node, every time
    assert g2 == u2.replace("-", "") and len(g2) == 32
    assert mn.replica_ids(VOL, "s3") != (u2, g2) and g2 != VOL.replace("-", "")
    mid = mn.mirror_id_for(VOL)
    assert mid == "nodeos-5b0e7c1d2a3f4e5d8c7b6a5f" and len(mid) <= 32  # md names hold 32 bytes
    assert mn.mirror_uuid(mid) == mn.mirror_uuid(mid) != mn.mirror_uuid(mn.mirror_id_for(u2))


def test_member_size_is_volume_plus_fixed_offset() -> None:
    assert mn.member_size_bytes(64 * MIB) == 72 * MIB
    for bad in (0, -MIB, MIB + 512, True):
        with pytest.raises(BadInput) as e:
            mn.member_size_bytes(bad)  # type: ignore[arg-type]
        assert e.value.field == "size_bytes"


def test_bad_names_are_refused_with_the_field() -> None:
    with pytest.raises(BadInput) as e:
        mn.replica_nqn("not-a-uuid", "s2")
    assert e.value.field == "vol_uuid"
    with pytest.raises(BadInput) as e:
        mn.replica_nqn(VOL, "../etc")
    assert e.value.field == "node_id"
    with pytest.raises(BadInput) as e:
        mn.check_mirror_id("md0")
    assert e.value.field == "mirror_id" and "nodeos-" in str(e.value.allowed)


# ---- initiator ------------------------------------------------------------------------
def test_connect_string_carries_hostnqn_hostid_and_timeouts() -> None:
    line = ini.connect_string(remote(keep_alive_tmo=3, ctrl_loss_tmo=30))
    opts = dict(kv.split("=", 1) for kv in line.split(","))
    assert opts == {
        "transport": "tcp",
        "traddr": "198.19.121.12",
        "trsvcid": "4420",
        "nqn": mn.replica_nqn(VOL, "s2"),
        "hostnqn": HOSTNQN,
        "hostid": HOSTID,
        "keep_alive_tmo": "3",
        "ctrl_loss_tmo": "30",
        "fast_io_fail_tmo": "-1",
        "reconnect_delay": "2",
    }


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(host_id="nope"), "host_id"),
        (dict(host_nqn="host1"), "host_nqn"),
        (dict(nguid="12"), "nguid"),
        (dict(keep_alive_tmo=-5), "keep_alive_tmo"),
        (dict(listener=Listener("tcp", "s2.lab", "4420")), "traddr"),
    ],
)
def test_bad_remote_spec_names_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(BadInput) as e:
        ini.check_remote_spec(remote(**kw))
    assert e.value.field == field


CTRLS = [
    ini.Ctrl("nvme0", "nqn.2019-08.org.qemu:NODEOS-s1-1", "pcie", {}, "live", ""),
    ini.Ctrl(
        "nvme1",
        mn.replica_nqn(VOL, "s2"),
        "tcp",
        ini.parse_address("traddr=198.19.121.12,trsvcid=4420,src_addr=198.19.121.11\n"),
        "live",
        HOSTNQN,
    ),
    ini.Ctrl(
        "nvme2",
        mn.replica_nqn(VOL, "s3"),
        "tcp",
        ini.parse_address("traddr=198.19.121.13,trsvcid=4420,src_addr=198.19.121.11"),
        "connecting",
        HOSTNQN,
    ),
]
DISKS = [
    ini.Disk("nvme0n1", None, ("dm-0",), "nqn.2019-08.org.qemu:NODEOS-s1-1"),
    ini.Disk("nvme1n1", "3adf4576e81e561f8f253fbd897de684", ("md127",), mn.replica_nqn(VOL, "s2")),
    ini.Disk("nvme2n1", "db7e457c27e854909e401cc18b7d6c64", (), mn.replica_nqn(VOL, "s3")),
]


def test_controllers_match_by_nqn_and_address() -> None:
    nqn = mn.replica_nqn(VOL, "s2")
    assert [c.name for c in ini.controllers_of(CTRLS, nqn)] == ["nvme1"]
    assert ini.controllers_of(CTRLS, nqn, Listener("tcp", "198.19.121.12", "4420"))[0].name == "nvme1"
    assert ini.controllers_of(CTRLS, nqn, Listener("tcp", "198.19.121.12", "4421")) == []
    assert ini.controllers_of(CTRLS, nqn, Listener("rdma", "198.19.121.12", "4420")) == []


def test_only_a_live_controller_makes_the_leg_usable() -> None:
    # s3 cut off and back: its controller reconnects while the multipath head stays.
    s3 = ini.controllers_of(CTRLS, mn.replica_nqn(VOL, "s3"))
    assert [c.state for c in s3] == ["connecting"] and not ini.is_live(s3)
    assert ini.is_live(ini.controllers_of(CTRLS, mn.replica_nqn(VOL, "s2")))
    assert not ini.is_live([])


def test_device_is_found_by_nguid_not_by_name_order() -> None:
    assert ini.disk_with_nguid(DISKS, "db7e457c-27e8-5490-9e40-1cc18b7d6c64").name == "nvme2n1"  # type: ignore[union-attr]
    assert ini.disk_with_nguid(list(reversed(DISKS)), "3ADF4576E81E561F8F253FBD897DE684").name == "nvme1n1"  # type: ignore[union-attr]
    assert ini.disk_with_nguid(DISKS, "00" * 16) is None
    twice = [*DISKS, ini.Disk("nvme3n1", DISKS[1].nguid, (), None)]
    with pytest.raises(OperationFailed, match="more than one"):
        ini.disk_with_nguid(twice, DISKS[1].nguid or "")


def test_remotes_list_only_replica_connections() -> None:
    got = ini.remote_infos(CTRLS, DISKS)
    assert [(r.nqn, r.state, r.device) for r in got] == [
        (mn.replica_nqn(VOL, "s2"), "live", "/dev/nvme1n1"),
        (mn.replica_nqn(VOL, "s3"), "connecting", "/dev/nvme2n1"),
    ]
    assert got[0].listener == Listener("tcp", "198.19.121.12", "4420")


# ---- md -------------------------------------------------------------------------------
def test_create_command_fixes_offset_size_bitmap_and_uuid() -> None:
    spec = mirror()
    cmd = mdc.cmd_create(spec, spec.members)
    assert cmd[:3] == ["mdadm", "--create", "/dev/md/nodeos-5b0e7c1d2a3f4e5d8c7b6a5f"]
    for opt in (
        "--metadata=1.2",
        "--level=1",
        "--raid-devices=3",
        "--bitmap=internal",
        "--assume-clean",
        "--data-offset=8192",  # KiB: the lab read 16384 sectors back from md/dev-*/offset
        "--size=65536",  # KiB per member == the volume
        f"--uuid={mn.mirror_uuid(spec.mirror_id)}",
        "--run",
    ):
        assert opt in cmd
    assert cmd[-3:] == list(spec.members)  # slot i = members[i], the control plane's order
    assert "--force" not in cmd and "--force" in mdc.cmd_create(spec, spec.members[:1])


def test_assemble_insists_on_the_array_uuid() -> None:
    cmd = mdc.cmd_assemble(mn.mirror_id_for(VOL), ["/dev/a", "/dev/b"])
    assert f"--uuid={mn.mirror_uuid(mn.mirror_id_for(VOL))}" in cmd and "--run" in cmd
    assert cmd[-2:] == ["/dev/a", "/dev/b"] and "--create" not in cmd


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(mirror_id="md0"), "mirror_id"),
        (dict(members=()), "members"),
        (dict(members=("/dev/a", "/dev/a")), "members"),
        (dict(members=("/dev/../etc/passwd",)), "members"),
        (dict(members=("nvme1n1",)), "members"),
        (dict(size_bytes=MIB + 1), "size_bytes"),
        (dict(data_offset_bytes=4096), "data_offset_bytes"),
    ],
)
def test_bad_mirror_spec_names_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(BadInput) as e:
        mdc.check_mirror_spec(mirror(**kw))
    assert e.value.field == field


# /sys/block/md127/md of a 3-leg mirror in the lab (kernel 6.12), as MdMirrors.snapshot reads it.
CLEAN = {
    "array_state": "clean",
    "degraded": "0",
    "raid_disks": "3",
    "sync_action": "idle",
    "sync_completed": "none",
    "size_sectors": "131072",
    "devs": {
        "dev-dm-4": {
            "state": "in_sync",
            "slot": "0",
            "offset": "16384",
            "device": "/dev/mapper/nodeos_p1-v_x",
        },
        "dev-nvme1n1": {"state": "in_sync", "slot": "1", "offset": "16384", "device": "/dev/nvme1n1"},
        "dev-nvme2n1": {"state": "in_sync", "slot": "2", "offset": "16384", "device": "/dev/nvme2n1"},
    },
}


def test_clean_mirror_status() -> None:
    info = mdc.mirror_info(mn.mirror_id_for(VOL), CLEAN)
    assert info.size_bytes == 64 * MIB and info.data_offset_bytes == mn.MIRROR_DATA_OFFSET
    assert not info.degraded and info.sync_action == "idle"
    assert [(m.slot, m.device, m.state) for m in info.members] == [
        (0, "/dev/mapper/nodeos_p1-v_x", "in_sync"),
        (1, "/dev/nvme1n1", "in_sync"),
        (2, "/dev/nvme2n1", "in_sync"),
    ]


def test_failed_leg_is_faulty_and_its_slot_missing() -> None:
    # s3 cut off: md failed the leg (state faulty, slot none) and runs on two.
    snap = {**CLEAN, "degraded": "1", "devs": {**CLEAN["devs"]}}  # type: ignore[dict-item]
    snap["devs"]["dev-nvme2n1"] = {
        "state": "faulty",
        "slot": "none",
        "offset": "16384",
        "device": "/dev/nvme2n1",
    }
    info = mdc.mirror_info(mn.mirror_id_for(VOL), snap)
    assert info.degraded
    assert [(m.slot, m.device, m.state) for m in info.members] == [
        (0, "/dev/mapper/nodeos_p1-v_x", "in_sync"),
        (1, "/dev/nvme1n1", "in_sync"),
        (2, None, "missing"),
        (None, "/dev/nvme2n1", "faulty"),
    ]


def test_returning_leg_is_rebuilding_with_progress() -> None:
    snap = {**CLEAN, "degraded": "1", "sync_action": "recover", "sync_completed": "32768 / 131072"}
    snap["devs"] = {**CLEAN["devs"]}  # type: ignore[dict-item]
    snap["devs"]["dev-nvme2n1"] = {"state": "", "slot": "2", "offset": "16384", "device": "/dev/nvme2n1"}
    info = mdc.mirror_info(mn.mirror_id_for(VOL), snap)
    leg = info.members[2]
    assert (leg.slot, leg.state, leg.progress) == (2, "rebuilding", 0.25)


def test_mdadm_export_parsing_and_uuid_forms() -> None:
    got = mdc.parse_export(
        "MD_LEVEL=raid1\nMD_NAME=nodeos-5b0e\nMD_UUID=d494afe3:2c8651c6:9d7fd422:d4b7185a\n"
    )
    assert got["MD_NAME"] == "nodeos-5b0e"
    assert mdc.same_uuid(got["MD_UUID"], "d494afe3-2c86-51c6-9d7f-d422d4b7185a")
    assert not mdc.same_uuid(got["MD_UUID"], "d494afe3-2c86-51c6-9d7f-d422d4b7185b")


def test_linear_view_table_and_checks() -> None:
    assert mdc.linear_table("253:4", 8 * MIB, 64 * MIB) == "0 131072 linear 253:4 16384"
    assert mdc.view_name("5b0e") == "nodeos-view-5b0e"
    with pytest.raises(BadInput) as e:
        mdc.view_name("a/b")
    assert e.value.field == "view_id"
    with pytest.raises(BadInput) as e:
        mdc.check_view(1000, 64 * MIB)
    assert e.value.field == "offset_bytes"


def test_referral_names_are_per_address() -> None:
    a = referral_name(PortAddr("tcp", "ipv4", "198.19.121.12", "8009"))
    b = referral_name(PortAddr("tcp", "ipv4", "198.19.121.13", "8009"))
    c = referral_name(PortAddr("tcp", "ipv6", "fd00::1", "8009"))
    assert a != b and "/" not in c and ":" not in c


def test_a_backend_without_mirrors_refuses_clearly() -> None:
    from nodeos.dataplane.select import NoDataPlane
    from nodeos.errors import NotSupported

    none = NoDataPlane()
    with pytest.raises(NotSupported) as e:
        none.assemble_mirror(mirror())
    assert e.value.field == "mirror_id" and "not supported by the none data plane" in e.value.message
    with pytest.raises(NotSupported):
        none.attach_remote(remote())
    assert none.list_mirrors() == [] and none.list_remotes() == [] and none.mirror_status("x") is None


# ---- write freezes for snapshots of replicated volumes --------------------------------
def test_a_freeze_holds_writes_to_the_whole_array_and_a_thaw_lets_them_go() -> None:
    assert mdc.freeze_writes_attrs(131072) == [("suspend_hi", "131072"), ("suspend_lo", "0")]
    assert dict(mdc.THAW_WRITES_ATTRS)["suspend_hi"] == "0"
    assert mdc.writes_frozen("0", "131072") and not mdc.writes_frozen("0", "0")
    assert not mdc.writes_frozen("", "")  # an array without the attributes holds nothing
    with pytest.raises(BadInput) as e:
        mdc.freeze_writes_attrs(0)
    assert e.value.field == "size"


def test_freeze_and_thaw_write_md_sysfs_in_order(tmp_path: object) -> None:
    from pathlib import Path

    sys_block = Path(str(tmp_path))
    mdd = sys_block / "md127" / "md"
    mdd.mkdir(parents=True)
    (mdd / "uuid").write_text(mn.mirror_uuid(mn.mirror_id_for(VOL)) + "\n")
    (sys_block / "md127" / "size").write_text("131072\n")
    for attr in ("suspend_lo", "suspend_hi"):
        (mdd / attr).write_text("0\n")
    mirrors = md.MdMirrors(sys_block=sys_block)
    mid = mn.mirror_id_for(VOL)
    assert not mirrors.writes_frozen(mid)
    mirrors.freeze_writes(mid)
    assert (mdd / "suspend_hi").read_text() == "131072" and mirrors.writes_frozen(mid)
    mirrors.thaw_writes(mid)
    assert not mirrors.writes_frozen(mid)
    with pytest.raises(NotFound):
        mirrors.freeze_writes(mn.mirror_id_for("00000000-0000-4000-8000-000000000000"))


def _examining(uuids: dict[str, str]) -> object:
    """mdadm --examine --export answers: the array uuid each member's superblock names."""
    import subprocess

    def run(cmd: list[str], timeout_s: float = 0, check: bool = True) -> subprocess.CompletedProcess[str]:
        u = uuids.get(cmd[-1])
        out = f"MD_LEVEL=raid1\nMD_UUID={u}\nMD_NAME=any\n" if u else ""
        return subprocess.CompletedProcess(cmd, 0 if u else 1, out, "")

    return run


def test_a_clone_creates_its_own_array_over_legs_carrying_its_origins_only() -> None:
    origin = mn.mirror_uuid(mn.mirror_id_for(VOL))
    clone_vol = "0b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"
    spec = mirror(mirror_id=mn.mirror_id_for(clone_vol), members=("/dev/a", "/dev/b"))
    legs = {"/dev/a": origin, "/dev/b": origin}
    with pytest.raises(OperationFailed, match="holds another md array") as e:
        md.MdMirrors(runner=_examining(legs))._create_is_new(spec, ["/dev/a", "/dev/b"])  # type: ignore[arg-type]
    assert e.value.field == "members"
    adopt = MirrorSpec(**{**spec.__dict__, "adopt_uuid": origin})
    assert md.MdMirrors(runner=_examining(legs))._create_is_new(adopt, ["/dev/a", "/dev/b"])  # type: ignore[arg-type]
    stranger = {"/dev/a": origin, "/dev/b": mn.mirror_uuid(mn.mirror_id_for(clone_vol[::-1]))}
    with pytest.raises(OperationFailed, match="holds another md array"):
        md.MdMirrors(runner=_examining(stranger))._create_is_new(adopt, ["/dev/a", "/dev/b"])  # type: ignore[arg-type]
    # a create of the clone's array that crashed half-way is finished by assembling
    mine = {"/dev/a": mn.mirror_uuid(adopt.mirror_id), "/dev/b": origin}
    assert not md.MdMirrors(runner=_examining(mine))._create_is_new(adopt, ["/dev/a", "/dev/b"])  # type: ignore[arg-type]


# ---- failover (issue 9) -------------------------------------------------------------
class _Runs:
    """The runner-injection edge: answers `dmsetup table` / `mdadm --examine` and records
    every command line."""

    def __init__(self, table: str | None = None, superblock: str | None = None) -> None:
        self.table, self.superblock = table, superblock
        self.cmds: list[list[str]] = []

    def __call__(self, cmd: list[str], timeout_s: float = 0, check: bool = True) -> object:
        import subprocess

        self.cmds.append(list(cmd))
        if cmd[:2] == ["dmsetup", "table"]:
            ok = self.table is not None
            return subprocess.CompletedProcess(cmd, 0 if ok else 1, (self.table or "") + "\n", "")
        if cmd[:2] == ["mdadm", "--examine"]:
            out = f"MD_UUID={self.superblock}\n" if self.superblock else ""
            return subprocess.CompletedProcess(cmd, 0 if self.superblock else 1, out, "")
        return subprocess.CompletedProcess(cmd, 0, "", "")


def test_a_blocked_view_maps_nothing_and_keeps_its_name() -> None:
    assert mdc.error_table(64 * MIB) == "0 131072 error"
    runs = _Runs(table=mdc.linear_table("253:4", 8 * MIB, 64 * MIB))
    dev = md.MdMirrors(runner=runs).block_view("5b0e", 64 * MIB)  # type: ignore[arg-type]
    assert dev == "/dev/mapper/nodeos-view-5b0e"
    assert runs.cmds[1:] == [
        ["dmsetup", "reload", "nodeos-view-5b0e", "--table", "0 131072 error"],
        ["dmsetup", "resume", "nodeos-view-5b0e"],
    ]
    again = _Runs(table="0 131072 error")
    md.MdMirrors(runner=again).block_view("5b0e", 64 * MIB)  # type: ignore[arg-type]
    assert len(again.cmds) == 1  # already blocked: only looked at


def test_a_leg_is_wiped_only_when_it_carries_a_superblock() -> None:
    assert mdc.cmd_zero_superblock("/dev/vg/lv") == ["mdadm", "--zero-superblock", "/dev/vg/lv"]
    with pytest.raises(BadInput) as e:
        mdc.cmd_zero_superblock("vg/lv")
    assert e.value.field == "device"
    leg = "/dev/null"  # a device that is there (mdadm runs recorded, not run)
    runs = _Runs(superblock=mn.mirror_uuid(mn.mirror_id_for(VOL)))
    md.MdMirrors(runner=runs).wipe_member(leg)  # type: ignore[arg-type]
    assert runs.cmds[-1] == ["mdadm", "--zero-superblock", leg]
    bare = _Runs()
    md.MdMirrors(runner=bare).wipe_member(leg)  # type: ignore[arg-type]
    assert [c[1] for c in bare.cmds] == ["--examine"]


def test_legs_that_failed_or_vanished_are_removed_by_keyword(tmp_path: object) -> None:
    from pathlib import Path

    sys_block = Path(str(tmp_path))
    mdd = sys_block / "md127" / "md"
    mdd.mkdir(parents=True)
    (mdd / "uuid").write_text(mn.mirror_uuid(mn.mirror_id_for(VOL)) + "\n")
    (mdd / "array_state").write_text("clean\n")
    (mdd / "raid_disks").write_text("2\n")
    (sys_block / "md127" / "size").write_text("131072\n")
    runs = _Runs()
    mirrors = md.MdMirrors(sys_block=sys_block, runner=runs)  # type: ignore[arg-type]
    spec = mirror(members=(str(sys_block / "lv"),), create=False)
    gone = MirrorInfo(
        mirror_id=spec.mirror_id,
        device="/dev/md127",
        size_bytes=64 * MIB,
        degraded=True,
        members=(MirrorMember(slot=None, device="/dev/nvme9n9", state="faulty"),),
        array_state="clean",
        sync_action="idle",
    )
    mirrors._reconcile_members(spec, gone)
    assert runs.cmds[:2] == [
        ["mdadm", "/dev/md127", "--remove", "failed"],
        ["mdadm", "/dev/md127", "--remove", "detached"],
    ]


def test_a_revoked_host_whose_controller_outlives_fatal_is_cut_by_relinking(tmp_path: object) -> None:
    import os
    from pathlib import Path

    from nodeos.dataplane.kernel.configfs import ConfigFs
    from nodeos.dataplane.kernel.nvmet import Nvmet

    root, dbg = Path(str(tmp_path)) / "cfg", Path(str(tmp_path)) / "dbg"
    nqn = mn.replica_nqn(VOL, "2")
    for d in (root / "subsystems" / nqn, root / "ports" / "1" / "subsystems", dbg / nqn / "ctrl1"):
        d.mkdir(parents=True)
    os.symlink(f"../../../subsystems/{nqn}", root / "ports" / "1" / "subsystems" / nqn)  # as first linked
    (dbg / nqn / "ctrl1" / "hostnqn").write_text("nqn.old-primary\n")
    (dbg / nqn / "ctrl1" / "state").write_text("live\n")
    link = root / "ports" / "1" / "subsystems" / nqn
    before = os.readlink(link)
    n = Nvmet(ConfigFs(root), debugfs=dbg)
    assert n.controllers(nqn)[0][1] == "nqn.old-primary"
    n.disconnect_host(nqn, "nqn.old-primary", settle_s=0.1)
    assert (dbg / nqn / "ctrl1" / "state").read_text() == "fatal"
    # still listed after the fatal write: the subsystem was unlinked and linked again
    assert os.path.exists(link) and os.readlink(link) != before


def test_a_read_only_view_fails_writes_in_the_target_and_is_never_reloaded() -> None:
    """A published volume's view (issue 13): dm-flakey permanently down with error_writes
    (reads pass through), made once; an existing one is kept as it is."""
    assert mdc.read_only_table("253:4", 8 * MIB, 64 * MIB) == "0 131072 flakey 253:4 16384 0 1 1 error_writes"
    runs = _Runs()
    md.MdMirrors(runner=runs).ensure_view("5b0e", "/dev/null", 0, 64 * MIB, True)  # type: ignore[arg-type]
    assert runs.cmds[1:] == [
        ["modprobe", "dm-flakey"],
        ["dmsetup", "create", "nodeos-view-5b0e", "--table", "0 131072 flakey 1:3 0 0 1 1 error_writes"],
    ]
    kept = _Runs(table="0 131072 flakey 1:3 0 0 1 1 error_writes")
    md.MdMirrors(runner=kept).ensure_view("5b0e", "/dev/null", 0, 128 * MIB, True)  # type: ignore[arg-type]
    assert kept.cmds == [["dmsetup", "table", "nodeos-view-5b0e"]]
