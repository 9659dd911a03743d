"""The drives SPDK holds, as `nodeos drive list` shows them (nodeos/dataplane/spdk/drives.py,
nodeos/node/inventory.py merge_owned) and which of them `pool create` may take
(nodeos/node/model.py pick_drives). SPDK's answers are shaped as v26.05 writes them
(module/bdev/nvme/bdev_nvme.c nvme_ctrlr_info_json, bdev_nvme_rpc.c health info)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.dataplane.spdk.drives import controller_name, drive_rows, pcie_controllers
from nodeos.errors import BadInput
from nodeos.hw.pci import Function
from nodeos.node.inventory import merge_owned
from nodeos.node.model import pick_drives

CONTROLLERS: list[dict[str, Any]] = [
    {
        "name": "nvme_000004000",
        "ctrlrs": [
            {
                "state": "enabled",
                "trid": {"trtype": "PCIe", "traddr": "0000:04:00.0"},
                "cntlid": 0,
                "host": {"nqn": "nqn.2014-08.org.nvmexpress:uuid:x", "addr": "", "svcid": ""},
            }
        ],
    },
    {
        "name": "nodeos_rep_abc",  # a replica's controller over TCP: not a drive
        "ctrlrs": [{"state": "enabled", "trid": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "10.0.0.2"}}],
    },
]
HEALTH = {
    "model_number": "Example NVMe 1TB",
    "serial_number": "S4EVNX0N123",
    "firmware_revision": "2B2QEXM7",
    "traddr": "0000:04:00.0",
    "critical_warning": 0,
    "temperature_celsius": 38,
    "available_spare_percentage": 100,
    "available_spare_threshold_percentage": 10,
    "percentage_used": 3,
    "data_units_read": 1234,
    "power_on_hours": 5000,
    "unsafe_shutdowns": 12,
    "media_errors": 0,
}
BDEV = {
    "name": "nvme_000004000n1",
    "num_blocks": 244198584,
    "block_size": 4096,
    "claimed": False,
    "driver_specific": {
        "nvme": [
            {
                "pci_address": "0000:04:00.0",
                "ctrlr_data": {"model_number": "Example NVMe 1TB", "serial_number": "S4EVNX0N123"},
            }
        ]
    },
}


def test_an_attached_drive_shows_model_serial_size_and_smart_health() -> None:
    assert controller_name("0000:04:00.0") == "nvme_000004000"
    assert pcie_controllers(CONTROLLERS) == {"0000:04:00.0": "nvme_000004000"}
    (row,) = drive_rows(CONTROLLERS, {"nvme_000004000": HEALTH}, {"nvme_000004000": BDEV})
    assert row["id"] == "S4EVNX0N123" and row["path"] == "pcie:0000:04:00.0" and row["owner"] == "spdk"
    assert row["model"] == "Example NVMe 1TB" and row["size_bytes"] == 244198584 * 4096
    assert row["health"] == "ok" and row["smart"]["temperature_c"] == 38 and row["smart"]["percent_used"] == 3


def test_a_critical_warning_or_unreadable_log_marks_the_drive() -> None:
    bad = dict(HEALTH, critical_warning=0x04, available_spare_percentage=5)
    (row,) = drive_rows(CONTROLLERS, {"nvme_000004000": bad}, {})
    assert row["health"] == "failing"
    assert any("reliability degraded" in r for r in row["health_reasons"])
    assert any("spare 5% below threshold 10%" in r for r in row["health_reasons"])
    (row,) = drive_rows(CONTROLLERS, {"nvme_000004000": "SPDK: no such object"}, {"nvme_000004000": BDEV})
    # as on the kernel side (nvme-cli): an unreadable health log counts as failing; the serial
    # (the drive's id) comes from the namespace bdev then
    assert row["health"] == "failing" and row["id"] == "S4EVNX0N123"
    assert row["health_reasons"] == ["SMART unreadable: SPDK: no such object"]


KERNEL = [{"id": "BOOT1", "path": "/dev/nvme0n1", "controller": "nvme0", "health": "ok", "size_bytes": 1}]
FUNCTIONS = [
    Function("0000:01:00.0", "nvme", "1", ("nvme0",), ("nvme0n1",)),
    Function("0000:04:00.0", "vfio-pci", "7"),
    Function("0000:05:00.0", "uio_pci_generic"),  # bound, but the target has not attached it
    Function("0000:06:00.0", ""),  # no driver
]
TESTS = [{"id": "aio0", "path": "aio0", "size_bytes": 1 << 30, "health": "unknown"}]


def _rows(dataplane: str) -> dict[str, dict[str, Any]]:
    spdk = drive_rows(CONTROLLERS, {"nvme_000004000": HEALTH}, {"nvme_000004000": BDEV})
    return {r["id"]: r for r in merge_owned(KERNEL, FUNCTIONS, spdk, TESTS, dataplane)}


def test_drive_list_shows_every_drive_whichever_side_owns_it() -> None:
    rows = _rows("spdk")
    assert {k: (r["owner"], r.get("address")) for k, r in rows.items()} == {
        "BOOT1": ("kernel", "0000:01:00.0"),
        "S4EVNX0N123": ("spdk", "0000:04:00.0"),
        "pcie:0000:05:00.0": ("spdk", "0000:05:00.0"),
        "pcie:0000:06:00.0": ("none", "0000:06:00.0"),
        "aio0": ("test", None),
    }
    assert rows["aio0"]["test_only"] is True
    assert rows["S4EVNX0N123"]["iommu_group"] == "7" and rows["BOOT1"]["iommu_group"] == "1"
    assert rows["pcie:0000:05:00.0"]["iommu_group"] is None
    assert "not attached by the SPDK target" in rows["pcie:0000:05:00.0"]["health_reasons"][0]
    assert "nodeos drive claim 0000:01:00.0" in rows["BOOT1"]["unusable"]


def test_pool_create_all_on_spdk_takes_spdk_drives_and_refuses_kernel_ones_by_name() -> None:
    rows = _rows("spdk")
    chosen = [d["path"] for d in pick_drives("all", rows, {})]
    assert chosen == ["pcie:0000:04:00.0", "pcie:0000:05:00.0", "aio0"]
    with pytest.raises(BadInput) as e:
        pick_drives(["BOOT1"], rows, {})
    assert e.value.field == "drives" and "owned by the kernel" in e.value.message
    kernel = _rows("kernel")
    assert [d["id"] for d in pick_drives("all", kernel, {})] == ["BOOT1", "aio0"]
    with pytest.raises(BadInput, match="owned by SPDK"):
        pick_drives(["S4EVNX0N123"], kernel, {})
