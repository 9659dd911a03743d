"""A spare NVMe drive for SPDK, named by its PCI address in NODEOS_HW_NVME (e.g. 0000:03:00.0),
and a REAL nvmf_tgt from NODEOS_SPDK_DIR; skipped with the reason elsewhere.

THE DRIVE'S CONTENTS ARE LOST. The tests hand it to SPDK (vfio-pci, or uio_pci_generic
without an IOMMU) and give it back to the kernel's nvme driver at the end. Root, hugepages
(1 GiB is reserved) and a drive that holds no mounted file system are needed:

    sudo NODEOS_HW_NVME=0000:03:00.0 NODEOS_SPDK_DIR=/opt/spdk .venv/bin/python -m pytest hwtests/spdk -v
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeos.dataplane.select import spdk_answers
from nodeos.dataplane.spdk import target_setup
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.hw import pci

HUGEMEM_MIB = 1024


@dataclass
class Spare:
    address: str
    serial: str  # as the kernel's nvme driver read it before the claim
    sysfs: pci.Sysfs


@dataclass
class HwTarget:
    bin_dir: Path
    proc: subprocess.Popen[bytes]
    sock: Path
    log: Path
    dp: SpdkDataPlane


def _bin_dir() -> Path:
    d = os.environ.get("NODEOS_SPDK_DIR")
    if not d:
        pytest.skip("NODEOS_SPDK_DIR is not set: no SPDK build to test against (see docs/spdk.md)")
    for cand in (Path(d) / "bin", Path(d) / "build" / "bin"):
        if (cand / "nvmf_tgt").is_file():
            return cand
    pytest.skip(f"NODEOS_SPDK_DIR={d} holds no bin/nvmf_tgt")
    raise AssertionError  # unreachable


@pytest.fixture(scope="session")
def spare() -> Spare:
    raw = os.environ.get("NODEOS_HW_NVME")
    if not raw:
        pytest.skip("no spare NVMe drive named: set NODEOS_HW_NVME to its PCI address (its data is lost)")
    if os.geteuid() != 0:
        pytest.skip("binding a drive to vfio-pci/uio_pci_generic needs root")
    address = pci.check_address(raw)
    sysfs = pci.Sysfs()
    found = {f.address: f for f in sysfs.functions()}
    if address not in found:
        pytest.skip(
            f"NODEOS_HW_NVME={raw}: no NVMe PCI function there (have: {', '.join(sorted(found)) or 'none'})"
        )
    f = found[address]
    if f.owner != "kernel" or not f.serial:
        pytest.skip(f"{address} must start on the kernel's nvme driver (it is on {f.driver or 'no driver'})")
    return Spare(address, f.serial, sysfs)


@pytest.fixture(scope="session")
def claimed(spare: Spare) -> Iterator[str]:
    """The spare drive bound to SPDK's driver for the session; given back to nvme afterwards."""
    s = spare.sysfs
    fns = s.functions()
    group = s.group(next(f.iommu_group for f in fns if f.address == spare.address))
    plan = pci.claim_plan(spare.address, fns, s.mounts(), s.swaps(), s.iommu(), group)
    assert plan.driver in pci.SPDK_DRIVERS and not plan.also, plan
    s.bind(spare.address, plan.driver)
    try:
        yield plan.driver
    finally:
        back = pci.release_plan(spare.address, s.functions(), {})
        if back.driver is not None:
            s.bind(spare.address, back.driver)
        deadline = time.monotonic() + 30  # the kernel probes the controller again
        while time.monotonic() < deadline:
            f = {x.address: x for x in s.functions()}[spare.address]
            if f.serial:
                break
            time.sleep(0.5)
        assert f.owner == "kernel" and f.serial == spare.serial, f"{spare.address} did not come back: {f}"


@pytest.fixture(scope="session")
def hw_target(claimed: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HwTarget]:
    """nvmf_tgt as systemd/nodeos-spdk.service runs it: hugepages, --wait-for-rpc, then the
    subsystem limit and framework_start_init by nodeos-spdk-setup. PCI scan on (no -u)."""
    bin_dir = _bin_dir()
    work = tmp_path_factory.mktemp("hw-spdk")
    target_setup.reserve_hugepages(HUGEMEM_MIB)
    sock, log = work / "spdk.sock", work / "nvmf_tgt.log"
    cmd = [str(bin_dir / "nvmf_tgt"), "-m", "0x1", "-s", str(HUGEMEM_MIB), "-r", str(sock), "--wait-for-rpc"]
    with open(log, "ab") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
    try:
        target_setup.init(str(sock), 2048, wait_s=60)
        deadline = time.monotonic() + 30
        while not spdk_answers(str(sock)):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        dp = SpdkDataPlane(str(sock), keys_dir=work / "keys", discovery_svcid=None, transports=("tcp",))
        yield HwTarget(bin_dir, proc, sock, log, dp)
        dp.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
