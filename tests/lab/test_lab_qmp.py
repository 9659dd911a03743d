"""`nodeos-lab plug` / `unplug` speak QMP to a real QEMU (no guest: started paused, `-S`).

A guest has to acknowledge an unplug (ACPI eject), so the full pull is proven by the lab test
tests/lab/test_drive_unplug.py; here: the protocol, the device QEMU adds on the drive's root
port, and QEMU's refusals surfacing as errors that name what went wrong.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos_devtools.lab import qemu, qmp

pytestmark = pytest.mark.skipif(shutil.which(qemu.QEMU_DEFAULT) is None, reason="needs QEMU")


@pytest.fixture
def paused_vm(tmp_path: Path) -> Iterator[Path]:
    sock = tmp_path / "qmp.sock"
    argv = [
        qemu.QEMU_DEFAULT, "-machine", "q35", "-accel", "tcg", "-nodefaults", "-display", "none", "-S",
        "-qmp", f"unix:{sock},server=on,wait=off",
        "-device", f"pcie-root-port,id={qemu.drive_port_id(0)},chassis=1",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield sock
    finally:
        proc.kill()
        proc.wait()


def _devices(sock: Path) -> list[str]:
    with qmp.Qmp(sock) as q:
        return [str(c["name"]) for c in q.execute("qom-list", path="/machine/peripheral")]


def test_plug_adds_the_nvme_controller_on_its_root_port_and_refuses_a_second(
    paused_vm: Path, tmp_path: Path
) -> None:
    img = tmp_path / "d0.img"
    img.write_bytes(b"\0" * 1024 * 1024)
    assert qemu.drive_device_id(0) not in _devices(paused_vm)
    qmp.plug_drive(paused_vm, 0, str(img), "NODEOS-s1-0")
    assert qemu.drive_device_id(0) in _devices(paused_vm)
    with qmp.Qmp(paused_vm) as q:
        serial = q.execute(
            "qom-get", path=f"/machine/peripheral/{qemu.drive_device_id(0)}", property="serial"
        )
    assert serial == "NODEOS-s1-0"
    with pytest.raises(qmp.QmpError, match="nvme0"):
        qmp.plug_drive(paused_vm, 0, str(img), "NODEOS-s1-0")


def test_unplug_of_a_drive_that_is_not_there_fails_naming_it(paused_vm: Path) -> None:
    with pytest.raises(qmp.QmpError, match="nvme0"):
        qmp.unplug_drive(paused_vm, 0, timeout=5)


def test_an_absent_socket_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(qmp.QmpError, match=r"none\.sock"):
        qmp.unplug_drive(tmp_path / "none.sock", 0, timeout=1)


def test_a_drive_can_be_made_to_report_a_smart_critical_warning_and_cleared(
    paused_vm: Path, tmp_path: Path
) -> None:
    img = tmp_path / "d0.img"
    img.write_bytes(b"\0" * 1024 * 1024)
    qmp.plug_drive(paused_vm, 0, str(img), "NODEOS-s1-0")
    path = f"/machine/peripheral/{qemu.drive_device_id(0)}"
    for bits in (4, 0):
        qmp.set_critical_warning(paused_vm, 0, bits)
        with qmp.Qmp(paused_vm) as q:
            assert q.execute("qom-get", path=path, property="smart_critical_warning") == bits
