"""A lab whose QEMUs were killed from outside (a run stopped by hand) is found dead, not reused:
`up` takes its state down instead of refusing the name, and a shared lab with a VM gone is booted
again (2026-12-03: a rerun failed at once with "s1 is not running (start it first)")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodeos_devtools.lab import Lab
from nodeos_devtools.lab import image as image_mod
from nodeos_devtools.lab.plan import plan_vms


class _StopBeforeBoot(Exception):
    pass


def _lab_with_pids(tmp_path: Path, pids: list[int | None], said: list[str]) -> Lab:
    the_lab = Lab("t-gone", root=tmp_path / "labs", progress=said.append)
    the_lab.dir.mkdir(parents=True)
    vms = plan_vms("t-gone", 0, storage=1, drives=1, hosts=1, drive_dir=tmp_path)
    for v, pid in zip(vms, pids, strict=True):
        v.pid = pid
    the_lab._save(
        {"name": "t-gone", "subnet": 0, "accel": "tcg", "image": "/img", "vms": {v.name: v for v in vms}}
    )
    return the_lab


def _a_pid_that_is_gone() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_lab_whose_qemus_are_gone_is_abandoned_and_names_them(tmp_path: Path) -> None:
    the_lab = _lab_with_pids(tmp_path, [_a_pid_that_is_gone(), None], [])
    assert the_lab.is_up()
    assert the_lab.stopped_vms() == ["s1", "h1"]
    assert the_lab.is_abandoned()


def test_a_process_that_is_not_the_vms_qemu_does_not_count_as_running(tmp_path: Path) -> None:
    with subprocess.Popen(["sleep", "30"]) as other:  # alive, but not this VM's QEMU (PID reuse)
        try:
            the_lab = _lab_with_pids(tmp_path, [other.pid, other.pid], [])
            assert the_lab.is_abandoned()
        finally:
            other.kill()


def test_up_takes_an_abandoned_lab_down_instead_of_refusing_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    the_lab = _lab_with_pids(tmp_path, [None, None], said)

    def stop(*a: object, **kw: object) -> None:
        raise _StopBeforeBoot

    monkeypatch.setattr(image_mod, "build_image", stop)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    with pytest.raises(_StopBeforeBoot):  # past the name check: it went on to build and boot
        the_lab.up(storage=1, drives=1, hosts=1)
    assert not the_lab.is_up()
    assert any("no VM running" in m and "taken down" in m for m in said), said


def test_a_never_booted_name_is_not_abandoned(tmp_path: Path) -> None:
    assert not Lab("t-none", root=tmp_path / "labs", progress=lambda m: None).is_abandoned()
