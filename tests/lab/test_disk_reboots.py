"""A disk-booted storage VM rebooted over and over (NODEOS_LAB_FULL; NODEOS_LAB_REBOOTS times, 15 by
default): every reboot gets back out of the firmware into a new boot of the same slot.

Why: OVMF's in-place reset under TCG once never left the firmware (1 of 9 resets, CI of
2026-11-30). The lab now runs a disk-booted VM with `-no-reboot` under a supervisor that starts
QEMU again on each reset, with the same disk and UEFI variable store
(tests/tooling/nodeos_devtools/lab/coldboot.py);
this is the loop that shows it holds, and its console shows each cold start."""

from __future__ import annotations

import os
import time

import pytest

from nodeos.errors import OperationFailed
from nodeos_devtools.lab import Lab
from nodeos_devtools.lab.qga import AgentUnavailable
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
LAB = dict(storage=1, drives=1, hosts=0, boot="disk")
REBOOTS = int(os.environ.get("NODEOS_LAB_REBOOTS", "15"))
ONE_REBOOT_S = 600.0  # TCG on a shared 2-core host: a boot to the guest agent takes 1-3 min
BANNER = "===== nodeos-lab: guest-reset: cold start"


def _boot(lab: Lab) -> tuple[str, str]:
    script = "cat /proc/sys/kernel/random/boot_id; grep -o 'rauc.slot=[AB]' /proc/cmdline"
    r = lab.sh("s1", script, timeout=30)
    boot_id, slot = r.stdout.split()
    return boot_id, slot


def test_every_reboot_of_a_disk_booted_vm_comes_back(lab: Lab) -> None:
    first_id, slot = _boot(lab)
    seen = {first_id}
    took: list[float] = []
    console_at = len(lab.logs("s1"))
    for i in range(REBOOTS):
        before = time.monotonic()
        lab.sh("s1", "systemd-run --on-active=1 --collect systemctl reboot", timeout=60)
        while True:
            waited = time.monotonic() - before
            assert waited < ONE_REBOOT_S, (
                f"reboot {i + 1} of {REBOOTS} not back after {waited:.0f} s (earlier: {took}); console: "
                + lab.logs("s1")[-1500:]
            )
            try:
                boot_id, now = _boot(lab)
                if boot_id not in seen:
                    break
            except (AgentUnavailable, OperationFailed, OSError):
                pass  # rebooting
            time.sleep(3)
        assert now == slot, "a reboot boots the same slot"
        seen.add(boot_id)
        took.append(round(time.monotonic() - before))
        print(f"reboot {i + 1}/{REBOOTS}: back in {took[-1]} s", flush=True)
    console = lab.logs("s1")[console_at:]
    assert console.count(BANNER) == REBOOTS, "each reboot a cold start of QEMU"
    lab.wait_ready("s1")  # nodeosd comes up after the last one too
    print(f"{REBOOTS} reboots, none hung: {took} s (max {max(took)} s)")
