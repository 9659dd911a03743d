"""One node's A/B update for real (issue 27): a storage VM booted from the raw disk under OVMF
(`up --boot disk`) takes a signed bundle of this tree with a bumped version (`nodeos node update`:
RAUC writes the other slot, the node reboots into it with a boot counter, the health gate passes,
systemd-bless-boot keeps it); then a bundle whose nodeosd cannot start: its slot is tried once,
the gate fails and reboots, and systemd-boot boots the good slot again by itself.

Both bundles are built by the test from copies of the tree (tests/lab/update_helpers.py), with the
real `nodeos-lab image --bundle`; the images and bundles are cached like every image."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nodeos
from nodeos.errors import OperationFailed
from nodeos_devtools.lab import Lab
from nodeos_devtools.lab.qga import AgentUnavailable
from tests.lab.shared_labs import LAB_FULL, NOT_FULL
from tests.lab.update_helpers import bump, make_bundle

# CI runs the update (about 13 min with the VM's boot on 2026-12-03); the rollback of a bundle
# whose daemon cannot start (12 min more: two boots and the failed try's) and the power cut run
# with NODEOS_LAB_FULL=1 (CI's 60 minutes, docs/testing.md). The gate's decisions and the boot
# counting it relies on are unit tests (tests/unit/update/).
# In CI's run of 2026-11-30 one of the VM's in-place resets never got out of OVMF (its DXE phase,
# no output; 1 of 9 resets under TCG): the lab now makes every reboot of a disk-booted VM a cold
# start of QEMU (tests/tooling/nodeos_devtools/lab/coldboot.py; tests/lab/test_disk_reboots.py reboots one in
# a loop).
# Should a firmware still go silent, the test fails within 5 min of it, naming it.
pytestmark = pytest.mark.lab
FIRMWARE_STUCK_S = 300.0  # no console output this long after a reset: the firmware hangs (above)
RESET_MARKS = (b"reboot: machine restart", b"===== nodeos-lab: guest-reset: cold start")
LAB = dict(storage=1, drives=1, hosts=0, boot="disk")
REBOOT_BOUND_S = 1800.0  # TCG on a shared 2-core host: a boot takes minutes, a failed try two boots
NEW = bump(nodeos.__version__)
BROKEN = bump(NEW)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The bumped bundle; the broken one is built by the first test that asks for it (CI runs
    none: building it is an image build of its own)."""
    work = tmp_path_factory.mktemp("bundle-trees")
    yield {"new": make_bundle(work, NEW)}


@pytest.fixture(scope="module")
def broken_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("broken-tree"), BROKEN, broken=True)


def _now(lab: Lab) -> tuple[str, str]:
    """(boot id, booted slot) of s1."""
    r = lab.sh(
        "s1", "cat /proc/sys/kernel/random/boot_id; grep -o 'rauc.slot=[AB]' /proc/cmdline", timeout=60
    )
    boot_id, slot = r.stdout.split()
    return boot_id, slot.removeprefix("rauc.slot=")


def _wait_rebooted(lab: Lab, before: str, slot: str) -> None:
    """Until s1 runs a boot other than `before` from `slot`, and is ready (nodeosd active)."""
    deadline = time.monotonic() + REBOOT_BOUND_S
    console = lab.console_path("s1")
    while True:
        assert time.monotonic() < deadline, f"s1 not back on slot {slot} after {REBOOT_BOUND_S:.0f} s"
        try:
            boot_id, now = _now(lab)
            if boot_id != before and now == slot:
                break
        except (AgentUnavailable, OperationFailed, OSError):
            pass  # rebooting (the agent's socket may be reset under us)
        quiet = time.time() - console.stat().st_mtime
        tail = console.read_bytes()[-300:]
        assert not (any(m in tail for m in RESET_MARKS) and quiet > FIRMWARE_STUCK_S), (
            f"s1's firmware printed nothing for {quiet:.0f} s after a reset (OVMF hang under TCG, see the "
            "module's note); console: " + tail.decode(errors="replace")
        )
        time.sleep(5)
    lab.wait_ready("s1")


def _show(lab: Lab) -> dict[str, Any]:
    out = json.loads(
        lab.exec("s1", ["nodeos", "node", "show", "s1", "--json"], timeout=120, check=True).stdout
    )
    out["by_slot"] = {s["name"]: s for s in out["slots"]}
    return out


def _update(lab: Lab, bundle: Path) -> dict[str, Any]:
    lab.copy(bundle, "s1", "/var/lib/nodeos/test.raucb", timeout=600)
    before, _ = _now(lab)
    r = lab.exec("s1", ["nodeos", "node", "update", "/var/lib/nodeos/test.raucb", "--json"], timeout=1800)
    assert r.rc == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["result"] == "written" and out["reboot"] is True
    out["boot_before"] = before
    return out


def test_update_to_a_newer_bundle_boots_it_once_and_keeps_it(lab: Lab, bundles: dict[str, Path]) -> None:
    before = _show(lab)
    assert before["version"] == nodeos.__version__
    assert before["by_slot"]["A"]["booted"] and before["by_slot"]["A"]["state"] == "good"
    out = _update(lab, bundles["new"])
    assert out["version"] == NEW and out["change"] == "upgrade"
    _wait_rebooted(lab, out["boot_before"], "B")
    after = _show(lab)
    assert after["version"] == NEW, "the node runs the new release from slot B"
    b, a = after["by_slot"]["B"], after["by_slot"]["A"]
    assert b["booted"] and b["version"] == NEW and b["state"] == "good", after["slots"]
    assert a["state"] == "good", after["slots"]
    # The gate ran on the counted boot and passed; systemd-bless-boot then removed the counter.
    gate = lab.exec("s1", ["systemctl", "is-active", "nodeos-health-gate.service"], timeout=60)
    assert gate.stdout.strip() == "active"
    entries = lab.exec("s1", ["ls", "/efi/loader/entries"], timeout=60, check=True).stdout.split()
    assert "nodeos-b.conf" in entries, entries
    # The new slot took its identity from provisioning's first source, as the old one did.
    prov = lab.exec("s1", ["nodeos", "provision", "show"], timeout=120, check=True).stdout
    assert "from the systemd credential nodeos.provision" in prov, prov


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_a_bundle_whose_daemon_cannot_start_is_rolled_back_by_the_firmware(
    lab: Lab, broken_bundle: Path
) -> None:
    start = _show(lab)
    if start["by_slot"]["B"].get("booted") is not True:
        pytest.skip("needs the node on slot B (the update test before this one)")
    console_at = len(lab.logs("s1"))
    out = _update(lab, broken_bundle)
    assert out["version"] == BROKEN
    _wait_rebooted(lab, out["boot_before"], "B")  # A tried once, its gate failed, B again
    after = _show(lab)
    assert after["version"] == NEW, "back on the release that passed its gate"
    a, b = after["by_slot"]["A"], after["by_slot"]["B"]
    assert b["booted"] and b["state"] == "good", after["slots"]
    assert a["state"] == "bad" and a["version"] == BROKEN, after["slots"]
    console = lab.logs("s1")[console_at:]
    assert "rauc.slot=A" in console, "slot A was tried"
    assert "health gate: nodeosd failed to start" in console, console[-3000:]
    entries = lab.exec("s1", ["ls", "/efi/loader/entries"], timeout=60, check=True).stdout.split()
    assert "nodeos-a+0-1.conf" in entries and "nodeos-b.conf" in entries, entries


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_power_lost_while_the_other_slot_is_written_boots_the_old_slot(
    lab: Lab, bundles: dict[str, Path]
) -> None:
    """Powered off while RAUC copies the image into the other slot: that slot never got an entry,
    so the slot that ran before boots, unchanged, and nodeosd is back."""
    before = _show(lab)
    boot_id, slot = _now(lab)
    lab.copy(bundles["new"], "s1", "/var/lib/nodeos/test.raucb", timeout=600)
    cmd = "nodeos node update /var/lib/nodeos/test.raucb --no-reboot --allow-downgrade"
    lab.sh("s1", f"systemd-run --unit=nodeos-test-update --collect {cmd}", timeout=60)
    deadline = time.monotonic() + 1200
    while True:  # RAUC's progress: past its checks (40 %), into copying the image
        assert time.monotonic() < deadline, "RAUC never started writing the slot"
        r = lab.exec("s1", ["busctl", "get-property", "de.pengutronix.rauc", "/",
                            "de.pengutronix.rauc.Installer", "Progress"], timeout=60)  # fmt: skip
        words = r.stdout.split()  # (isi) 45 "Updating slots" 1
        if r.rc == 0 and len(words) > 1 and words[1].isdigit() and 40 < int(words[1]) < 100:
            break
        time.sleep(2)
    time.sleep(10)
    lab.kill("s1")
    lab.start("s1")
    after_id, after_slot = _now(lab)
    assert after_id != boot_id and after_slot == slot, "the slot that ran before boots"
    after = _show(lab)
    assert after["version"] == before["version"]
    assert after["by_slot"][slot]["state"] == "good", after["slots"]
    entries = lab.exec("s1", ["ls", "/efi/loader/entries"], timeout=60, check=True).stdout.split()
    assert not [e for e in entries if "+" in e and not e.endswith("+0-1.conf")], entries
