"""A mirror that will not stop names what holds it open (the lab, 2026-12-02: a delete retried
for minutes on "mdadm: failed to stop array /dev/md127: Device or resource busy; Perhaps a
running process..." with the holder, a local `dd`, named nowhere)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from nodeos.dataplane import mirror_names as mn
from nodeos.dataplane.kernel import holders
from nodeos.dataplane.kernel import mirror as md
from nodeos.errors import OperationFailed
from tests.unit.dataplane.test_md_super import VOL, _array

BUSY = "mdadm: failed to stop array /dev/md127: Device or resource busy\n"


def test_a_process_with_the_file_open_is_found_in_the_real_proc(tmp_path: Path) -> None:
    f = tmp_path / "held"
    f.write_bytes(b"x")
    target = os.stat(f)

    def is_it(st: os.stat_result) -> bool:
        return (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino)

    assert os.getpid() not in dict(holders.processes_holding(is_it))
    with open(f, "rb"):
        found = dict(holders.processes_holding(is_it))
    assert os.getpid() in found and found[os.getpid()]  # named by its command


def _stopping(tmp_path: Path, stderr: str) -> md.MdMirrors:
    def runner(cmd: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        if cmd[:2] == ["mdadm", "--stop"] and stderr:
            raise OperationFailed(f"mdadm --stop {cmd[2]} failed: {stderr.strip()}")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    _array(tmp_path, "md127", mn.mirror_uuid(mn.mirror_id_for(VOL)), {"dm-4": "in_sync"})
    (tmp_path / "sys" / "md127" / "dev").write_text("9:127\n")
    (tmp_path / "sys" / "md127" / "holders").mkdir()
    (tmp_path / "dev").mkdir()
    os.mknod(tmp_path / "dev" / "md127", 0o600 | stat.S_IFBLK, os.makedev(9, 127))
    # A process table with `dd` (pid 1329) holding md127 and `sh` (pid 1328) holding nothing.
    for pid, comm, target in (("1329", "dd", tmp_path / "dev" / "md127"), ("1328", "sh", tmp_path / "sys")):
        (tmp_path / "proc" / pid / "fd").mkdir(parents=True)
        (tmp_path / "proc" / pid / "comm").write_text(comm + "\n")
        (tmp_path / "proc" / pid / "fd" / "3").symlink_to(target)
    return md.MdMirrors(
        sys_block=tmp_path / "sys",
        dev_dir=tmp_path / "dev",
        runner=runner,
        node_dir=tmp_path / "nodes",
        proc_dir=tmp_path / "proc",
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="making a block device node needs root")
def test_a_busy_stop_names_the_process_and_the_kernel_user_holding_the_array(tmp_path: Path) -> None:
    mirrors = _stopping(tmp_path, BUSY)
    (tmp_path / "sys" / "md127" / "holders" / "dm-3").touch()
    with pytest.raises(OperationFailed) as e:
        mirrors.stop(mn.mirror_id_for(VOL))
    said = str(e.value)
    assert "Device or resource busy" in said  # mdadm's own words kept
    assert said.endswith("(held open by dm-3 (kernel), dd (pid 1329))"), said


@pytest.mark.skipif(os.geteuid() != 0, reason="making a block device node needs root")
def test_another_stop_failure_is_passed_on_as_it_is(tmp_path: Path) -> None:
    mirrors = _stopping(tmp_path, "mdadm: Cannot get exclusive access to /dev/md127: no such thing\n")
    with pytest.raises(OperationFailed) as e:
        mirrors.stop(mn.mirror_id_for(VOL))
    assert "held open" not in str(e.value)
    assert _stopping(tmp_path / "ok", "").stop(mn.mirror_id_for(VOL)) is None
