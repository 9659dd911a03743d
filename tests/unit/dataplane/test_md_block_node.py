"""A mirror's md device is always md's own block node: never a regular file squatting /dev/mdN
(the lab, 2026-11-29: a `dd of=/dev/md127` that outlived its array left a file there; the next
md127 was exported by nvmet as that file and `mdadm --stop /dev/md127` failed for ever)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from nodeos.dataplane import mirror_names as mn
from nodeos.dataplane.kernel import mirror as md
from tests.unit.dataplane.test_md_super import VOL, _array

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making a block device node needs root")


def _mirrors(tmp_path: Path, calls: list[list[str]]) -> md.MdMirrors:
    def runner(cmd: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    u = mn.mirror_uuid(mn.mirror_id_for(VOL))
    _array(tmp_path, "md127", u, {"dm-4": "in_sync"})
    (tmp_path / "sys" / "md127" / "dev").write_text("9:127\n")
    (tmp_path / "dev").mkdir()
    return md.MdMirrors(
        sys_block=tmp_path / "sys", dev_dir=tmp_path / "dev", runner=runner, node_dir=tmp_path / "nodes"
    )


def _is_md127(path: str) -> bool:
    st = os.stat(path)
    return stat.S_ISBLK(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (9, 127)


def test_a_regular_file_at_dev_md127_is_neither_exported_nor_stopped(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    mirrors = _mirrors(tmp_path, calls)
    squatter = tmp_path / "dev" / "md127"
    squatter.write_bytes(b"x" * 4096)  # what `dd of=/dev/md127` makes once md127 is gone
    info = mirrors.status(mn.mirror_id_for(VOL))
    assert info is not None and info.device != str(squatter) and _is_md127(info.device)
    mirrors.stop(mn.mirror_id_for(VOL))
    assert calls[-1][:2] == ["mdadm", "--stop"] and _is_md127(calls[-1][2])
    assert squatter.read_bytes() == b"x" * 4096  # left alone: not ours to delete


def test_md_own_node_in_dev_is_used_as_it_is(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    mirrors = _mirrors(tmp_path, calls)
    node = tmp_path / "dev" / "md127"
    os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(9, 127))
    mirrors.stop(mn.mirror_id_for(VOL))
    assert calls[-1] == ["mdadm", "--stop", str(node)]
    assert not (tmp_path / "nodes").exists()
