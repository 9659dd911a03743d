"""The PCIe path on a real NVMe drive (issue 12): hand it to SPDK, attach it, read its SMART
health from SPDK, make a pool and a volume on it, export it and do I/O through the export, give
it back to the kernel. Skipped without NODEOS_HW_NVME / NODEOS_SPDK_DIR (hwtests/spdk/conftest.py)."""

from __future__ import annotations

import socket
import subprocess

import pytest

from hwtests.spdk.conftest import HwTarget, Spare
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener
from nodeos.dataplane.spdk.drives import controller_name, pcie_drives
from nodeos.errors import BadInput
from nodeos.hw import pci
from nodeos.node.inventory import merge_owned

MIB = 1024 * 1024
HOST = "nqn.2014-08.org.nvmexpress:uuid:3a0c3e1e-4a57-4c6f-9d0e-1a2b3c4d5e6f"
UUID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
NQN = f"nqn.2014-08.io.nodeos:vol:{UUID}"


def test_the_boot_drive_is_refused_on_this_machine() -> None:
    s = pci.Sysfs()
    fns, mounts, swaps = s.functions(), s.mounts(), s.swaps()
    boot = [
        f for f in fns if any(m in pci.BOOT_MOUNTS for n in f.blocks + f.holders for m in mounts.get(n, ()))
    ]
    if not boot:
        pytest.skip("the root file system is not on an NVMe drive here")
    with pytest.raises(BadInput) as e:
        pci.claim_plan(boot[0].address, fns, mounts, swaps, s.iommu())
    assert e.value.field == "address" and "boot drive" in e.value.message


def test_the_claimed_drive_is_spdks_and_listed_so(spare: Spare, claimed: str) -> None:
    f = {x.address: x for x in spare.sysfs.functions()}[spare.address]
    assert f.driver == claimed and f.owner == "spdk" and not f.controllers  # gone from the kernel
    rows = merge_owned([], [f], [], [], "spdk")
    assert rows[0]["owner"] == "spdk" and rows[0]["usable"] and rows[0]["path"] == f"pcie:{spare.address}"


def test_attach_smart_pool_volume_export_and_io(spare: Spare, hw_target: HwTarget) -> None:
    dp = hw_target.dp
    info = dp.create_pool("hw", [f"pcie:{spare.address}"])
    assert info.devices == (controller_name(spare.address) + "n1",) and info.size_bytes > 0
    (row,) = pcie_drives(dp)
    assert row["serial"] == spare.serial and row["id"] == spare.serial  # what the kernel read
    assert row["address"] == spare.address and row["size_bytes"] >= info.size_bytes
    assert row["health"] in ("ok", "failing") and row["smart"]["temperature_c"] is not None
    dp.create_volume("hw", "v1", 256 * MIB)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    spec = ExportSpec(
        nqn=NQN,
        serial="NODEOSHW0001",
        pool_id="hw",
        vol_id="v1",
        uuid=UUID,
        nguid=UUID.replace("-", ""),
        listeners=(Listener("tcp", "127.0.0.1", port),),
        hosts=(HostAccess(HOST),),
    )
    dp.apply_export(spec)
    try:
        trid = f"trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN} hostnqn:{HOST}"
        perf = hw_target.bin_dir / "spdk_nvme_perf"
        r = subprocess.run(
            [str(perf), "--no-huge", "-s", "512", "-c", "0x2", "-q", "8", "-o", "4096", "-w", "randrw",
             "-M", "50", "-t", "5", "-r", trid],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "Total" in r.stdout
    finally:
        dp.remove_export(NQN)
        dp.delete_volume("hw", "v1")
        dp.delete_pool("hw")


def test_a_pool_drive_is_not_released_and_a_free_one_goes_back(spare: Spare, hw_target: HwTarget) -> None:
    from nodeos.dataplane.spdk.drives import detach_pcie

    dp = hw_target.dp
    dp.create_pool("hw2", [f"pcie:{spare.address}"])
    with pytest.raises(BadInput) as e:
        detach_pcie(dp, spare.address)  # the lvstore holds it
    assert e.value.field == "address"
    dp.delete_pool("hw2")
    assert detach_pcie(dp, spare.address) is True
    assert pcie_drives(dp) == []
