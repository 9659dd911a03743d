"""LVM never reads a remote leg, an md array or a view (issue 25): the filter every LVM command
carries, read from a sysfs tree laid out as the kernel lays it out for local and fabric NVMe."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from nodeos.bounded_run import run_bounded
from nodeos.dataplane.kernel import lvm, lvm_scan
from nodeos.errors import OperationFailed


def _ctrl(root: Path, name: str, transport: str) -> Path:
    c = root / "class" / "nvme" / name
    c.mkdir(parents=True)
    (c / "transport").write_text(transport + "\n")
    return c


def _head(root: Path, disk: str, subsys: str, ctrls: dict[str, str]) -> None:
    """A multipath head: /sys/block/DISK/device -> nvme-subsysN, which links its controllers."""
    sub = root / "devices" / "virtual" / "nvme-subsystem" / subsys
    sub.mkdir(parents=True)
    for name, transport in ctrls.items():
        (sub / name).symlink_to(_ctrl(root, name, transport))
    blk = root / "block" / disk
    blk.mkdir(parents=True)
    (blk / "device").symlink_to(sub)


def _plain(root: Path, disk: str, ctrl: str, transport: str) -> None:
    blk = root / "block" / disk
    blk.mkdir(parents=True)
    (blk / "device").symlink_to(_ctrl(root, ctrl, transport))


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    _head(tmp_path, "nvme0n1", "nvme-subsys0", {"nvme0": "pcie"})  # a local drive
    _head(tmp_path, "nvme1n1", "nvme-subsys1", {"nvme1": "pcie"})
    _head(tmp_path, "nvme2n1", "nvme-subsys2", {"nvme2": "tcp"})  # a leg over TCP
    _head(tmp_path, "nvme3n1", "nvme-subsys3", {"nvme3": "rdma", "nvme4": "rdma"})
    _plain(tmp_path, "nvme5n1", "nvme5", "loop")  # multipath off
    (tmp_path / "block" / "nvme2c2n1").mkdir()  # a path node, never scanned by name
    return tmp_path / "block"


def test_fabric_namespaces_are_the_remote_ones_only(sysfs: Path) -> None:
    assert lvm_scan.fabric_namespaces(sysfs) == ["nvme2n1", "nvme3n1", "nvme5n1"]


def test_the_filter_rejects_remote_legs_md_and_views_and_accepts_local_drives(sysfs: Path) -> None:
    assert lvm_scan.local_namespaces(sysfs) == ["nvme0n1", "nvme1n1"]
    setting = lvm_scan.global_filter(lvm_scan.local_namespaces(sysfs))
    rules = re.findall(r'"([ar])\|(.*?)\|"', setting)
    assert rules[-1] == ("r", ".*")

    def accepted(*names: str) -> bool:
        """lvm.conf(5): accepted when ANY of a device's names meets an "a" rule first."""
        return any(next(kind for kind, pat in rules if re.search(pat, n)) == "a" for n in names)

    # Every name udev gives them: the /dev/disk aliases let the old deny list's "a|.*|" in.
    assert not accepted("/dev/nvme2n1", "/dev/disk/by-id/nvme-uuid.9f0c", "/dev/disk/by-path/ip-x-nvme")
    assert not accepted("/dev/nvme3n1", "/dev/disk/by-id/nvme-nqn.2014-08.io.nodeos:x")
    assert not accepted("/dev/nvme5n1")
    assert not accepted("/dev/md127", "/dev/md/nodeos-x", "/dev/disk/by-id/md-uuid-1", "/dev/disk/by-uuid/2")
    assert not accepted("/dev/dm-3", "/dev/mapper/nodeos-view-x", "/dev/disk/by-id/dm-name-nodeos-view-x")
    assert not accepted("/dev/nvme2c2n1")
    assert accepted("/dev/nvme0n1", "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NODEOS-s1-0")
    assert accepted("/dev/nvme1n1p2") and accepted("/dev/sda") and accepted("/dev/vdb1")
    assert not accepted("/dev/nvme10n1")  # nvme1n1's name as a prefix of another's


def test_every_lvm_command_carries_the_filter_in_its_one_config(
    sysfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], timeout_s: float, env: dict[str, str], package: str = "") -> object:
        seen.append(cmd)
        import subprocess

        return subprocess.CompletedProcess(cmd, 0, '{"report": [{"lv": []}]}', "")

    monkeypatch.setattr(lvm, "run_bounded", fake_run)
    runner = lvm.LvmRunner(sys_block=sysfs)
    runner.lvs()
    runner.run(lvm.cmd_create_thin("p1", "v1", 1 << 30))
    for cmd in seen:
        assert cmd.count("--config") == 1
        cfg = cmd[cmd.index("--config") + 1]
        assert "global_filter" in cfg and "nvme0n1" in cfg and "nvme2n1" not in cfg and '"r|.*|"' in cfg
    # the thin_check options of a command that may activate the pool are kept beside it
    assert "thin_check_options" in seen[1][seen[1].index("--config") + 1]


def test_a_command_past_its_deadline_is_killed_and_named() -> None:
    started = time.monotonic()
    with pytest.raises(OperationFailed, match=r"sleep 30 did not finish within 0 s \(killed\)"):
        run_bounded(["sleep", "30"], 0.3)
    assert time.monotonic() - started < 5


def test_a_command_that_finishes_gives_its_output() -> None:
    p = run_bounded(["sh", "-c", "echo out; echo err >&2; exit 3"], 5)
    assert (p.returncode, p.stdout, p.stderr) == (3, "out\n", "err\n")


def test_a_recent_report_is_reused_until_a_command_changes_lvm(
    sysfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's pass, the metrics and the orphan scan list LVs within seconds of each other:
    one `lvs` serves them (1-3 s of CPU each on a TCG VM), never across a change of ours."""
    ran: list[str] = []
    during: list[object] = []

    def fake_run(cmd: list[str], timeout_s: float, env: dict[str, str], package: str = "") -> object:
        import subprocess

        ran.append(cmd[0])
        if during:
            during.pop()()  # a change that begins while this report runs
        return subprocess.CompletedProcess(cmd, 0, '{"report": [{"lv": []}]}', "")

    monkeypatch.setattr(lvm, "run_bounded", fake_run)
    runner = lvm.LvmRunner(sys_block=sysfs)
    runner.lvs()
    runner.lvs()
    runner.run(lvm.cmd_pvs())
    runner.run(lvm.cmd_pvs())
    assert ran == ["lvs", "pvs"]
    runner.run(lvm.cmd_create_thin("p1", "v1", 1 << 30))
    runner.lvs()
    assert ran == ["lvs", "pvs", "lvcreate", "lvs"]
    # a report that ran while something changed LVM is not kept
    runner.run(lvm.cmd_lvremove("p1", "v1"))
    during.append(runner._changed)
    runner.lvs()
    runner.lvs()
    assert ran[-3:] == ["lvremove", "lvs", "lvs"]
    # and none is kept past its age
    stale = lvm.LvmRunner(sys_block=sysfs, reuse_s=0.0)
    stale.lvs()
    time.sleep(0.01)
    stale.lvs()
    assert ran[-2:] == ["lvs", "lvs"]
