"""The raw disk image boots like bare metal: OVMF (UEFI) -> systemd-boot -> multi-user, nodeosd on."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos_devtools.lab import image, qemu
from nodeos_devtools.lab.qga import GuestAgent

pytestmark = pytest.mark.labimage
PROJECT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("NODEOS_ARTIFACTS", PROJECT / "artifacts")) / "lab" / "uefi"
BOOT_TIMEOUT = 900


@pytest.fixture(scope="module")
def booted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuestAgent]:
    if os.geteuid() != 0:
        pytest.skip("building the image needs root")
    if not (qemu.OVMF_DIR / "OVMF_CODE_4M.fd").exists():
        pytest.fail("OVMF firmware missing: run images/bootstrap.sh (package ovmf)")
    img = image.build_image(raw=True)
    work = tmp_path_factory.mktemp("uefi")
    vars_file = work / "OVMF_VARS_4M.fd"
    shutil.copyfile(qemu.OVMF_DIR / "OVMF_VARS_4M.fd", vars_file)
    qemu_bin = qemu.find_qemu()
    accel = qemu.choose_accel(qemu_bin, img.kernel)
    argv = qemu.uefi_command_line(
        qemu_bin, accel=accel, disk=img.raw, vars_file=vars_file, work=work, tag="nodeos-lab-uefi-test"
    )
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=(work / "qemu.log").open("wb"))
    failed = True
    try:
        agent = GuestAgent(work / "qga.sock")
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not agent.ping(timeout=2):
            assert proc.poll() is None, (work / "qemu.log").read_text()
            assert time.monotonic() < deadline, "no guest agent: the raw image did not boot"
            time.sleep(2)
        yield agent
        failed = False
    finally:
        proc.kill()
        proc.wait()
        if failed or os.environ.get("NODEOS_KEEP_CONSOLES"):
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            for f in ("console.log", "qemu.log"):
                if (work / f).exists():
                    shutil.copyfile(work / f, ARTIFACTS / f)


def test_raw_image_boots_uefi_to_multi_user_with_nodeosd_active(booted: GuestAgent) -> None:
    r = booted.exec(["systemctl", "is-system-running", "--wait"], timeout=BOOT_TIMEOUT)
    assert r.stdout.strip() in ("running", "degraded"), r.stdout
    assert booted.exec(["systemctl", "is-active", "multi-user.target"]).stdout.strip() == "active"
    # Booted through UEFI firmware and systemd-boot, root found by its partition UUID.
    assert booted.exec(["test", "-d", "/sys/firmware/efi"]).rc == 0
    cmdline = booted.exec(["cat", "/proc/cmdline"]).stdout
    assert f"root=PARTUUID={image.ROOT_PARTUUID}" in cmdline
    loader = booted.exec(["cat", "/sys/firmware/efi/efivars/LoaderInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"])
    assert "systemd-boot" in loader.stdout_bytes.decode("utf-16-le", errors="replace")
    # The machine made its own NVMe host identity at first boot.
    nqn = booted.exec(["cat", "/etc/nvme/hostnqn"]).stdout.strip()
    assert nqn.startswith("nqn.2014-08.org.nvmexpress:uuid:")
    end = time.monotonic() + 900  # polled; a Python daemon starts slowly under an emulated CPU
    while (state := booted.exec(["systemctl", "is-active", "nodeosd"]).stdout.strip()) != "active":
        assert time.monotonic() < end, booted.exec(["journalctl", "-b", "-u", "nodeosd", "--no-pager"]).stdout
        time.sleep(2)
    assert state == "active"
