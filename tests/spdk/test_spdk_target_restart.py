"""Against a REAL nvmf_tgt in interrupt mode (marker `spdk`; idle, it costs no CPU): the target
started as systemd/nodeos-spdk.service starts it, and what a pool over several drives meets
when the target is killed and its drives come back (issue 12).

- `nvmf_tgt --wait-for-rpc` + `nodeos-spdk-setup init`: the subsystem limit is in the target's
  configuration, a second init leaves the running target alone;
- AIO test drives re-created with the same name and file keep their UUID: the raid0 superblock
  reassembles the pool by itself and its volume is back;
- drives re-created with new UUIDs, or only some of them: the pool's raid cannot be made, and
  the error says why (not SPDK's "exists already")."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk import target_setup
from nodeos.errors import OperationFailed
from tests.spdk.conftest import SpdkTarget, need_root, spdk_dir, start_target, stop_target

pytestmark = pytest.mark.spdk

MIB = 1024 * 1024
QUIET = ("--interrupt-mode", "--disable-cpumask-locks")


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    need_root()
    yield tmp_path


def _target(work: Path, *extra: str) -> SpdkTarget:
    return start_target(spdk_dir(), work, (*QUIET, *extra), nice=19, discovery_svcid=None)


def _drives(work: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        f = work / f"d{i}.img"
        if not f.exists():
            with open(f, "wb") as fh:
                fh.truncate(64 * MIB)
        out.append(f)
    return out


def test_the_unit_start_sets_the_subsystem_limit_before_the_framework(work: Path) -> None:
    t = _target(work, "--wait-for-rpc")
    try:
        out = target_setup.init(str(t.sock), 4096, wait_s=30)
        assert "at most 4096 subsystems" in out
        cfg = t.dp.call(("framework_get_config", {"name": "nvmf"}))
        assert {"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 4096}} in cfg
        assert "running already" in target_setup.init(str(t.sock), 8192, wait_s=30)
    finally:
        stop_target(t)


def test_a_restarted_target_gets_its_pool_back_or_says_why_not(work: Path) -> None:
    files = _drives(work, 2)
    t = _target(work)
    try:
        for i, f in enumerate(files):
            t.dp.create_aio_drive_for_tests(f"aio{i}", str(f))
        t.dp.create_pool("q", ["aio0", "aio1"])
        t.dp.create_volume("q", "v1", 8 * MIB)
    finally:
        stop_target(t, signal.SIGKILL)
    t = _target(work)  # the same drives, as a test re-creates them: the same UUIDs
    try:
        for i, f in enumerate(files):
            t.dp.create_aio_drive_for_tests(f"aio{i}", str(f))
        assert t.dp.create_pool("q", ["aio0", "aio1"]).devices == ("aio0", "aio1")
        assert [v.vol_id for v in t.dp.list_volumes("q")] == ["v1"]
    finally:
        stop_target(t, signal.SIGKILL)
    t = _target(work)  # the drives with new random UUIDs (bdev_aio_create without one)
    try:
        for i, f in enumerate(files):
            t.dp.call(rq.aio_create_for_tests(str(f), f"aio{i}"))
        with pytest.raises(OperationFailed) as e:
            t.dp.create_pool("q", ["aio0", "aio1"])
        assert e.value.field == "drives" and "exists already" not in e.value.message
        assert "holds the superblock of a different raid" in e.value.message
    finally:
        stop_target(t, signal.SIGKILL)
    t = _target(work)  # one drive back with its UUID, the other gone
    try:
        t.dp.create_aio_drive_for_tests("aio0", str(files[0]))
        t.dp.create_malloc_drive_for_tests("m1", 64 * MIB)
        with pytest.raises(OperationFailed) as e:
            t.dp.create_pool("q", ["aio0", "m1"])
        assert e.value.field == "drives" and "state configuring" in e.value.message
        assert "1 of 2 members (aio0" in e.value.message
    finally:
        stop_target(t, signal.SIGKILL)
