"""A storage VM booted from an image built with SPDK (issue 27, NODEOS_SPDK_DIR): the node runs
the SPDK data plane by default (the image carries nvmf_tgt and the VM has an NVMe drive), and a
volume on it is created, exported and written from a GPU node, through nodeosd and `nodeos`.

Run by the lead (it boots VMs):
    NODEOS_LAB_FULL=1 NODEOS_SPDK_DIR=/work/spdk-build/dist \
        .venv/bin/python -m pytest -q tests/lab/test_spdk_image.py
The lab builds (or reuses) the SPDK image itself: the image key includes the SPDK build.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from nodeos_devtools.lab import Lab
from tests.lab.dataplane_helpers import (
    connect,
    connected,
    device_of,
    disconnect,
    read_sum,
    wait_for,
    write_random,
)
from tests.lab.node_helpers import nodeos, ok, wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL),
    pytest.mark.skipif(not os.environ.get("NODEOS_SPDK_DIR"), reason="needs NODEOS_SPDK_DIR (an SPDK build)"),
]
LAB = dict(storage=1, drives=1, hosts=1, drive_size_mib=512)  # its own lab: an SPDK image
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def s1(lab: Lab) -> Iterator[str]:
    wait_daemon(lab, "s1")
    yield "s1"


@pytest.fixture(scope="module")
def drive(lab: Lab, s1: str) -> Iterator[dict]:
    """The VM's NVMe drive, handed to SPDK (`nodeos drive claim`: uio_pci_generic, no vIOMMU)."""
    drives = ok(lab, s1, "drive", "list")
    assert len(drives) == 1, drives
    d = drives[0]
    ok(lab, s1, "drive", "claim", d["address"])
    yield d
    nodeos(lab, s1, "drive", "release", d["address"])


@pytest.fixture(scope="module")
def v1(lab: Lab, s1: str, drive: dict) -> Iterator[dict]:
    ok(lab, s1, "pool", "create", "p1", "--drives", "all")
    nqn = lab.spec("h1").hostnqn
    ok(lab, s1, "host", "add", nqn)
    ok(lab, s1, "volume", "create", "v1", "--size", "128MiB")
    ok(lab, s1, "volume", "grant", "v1", "--host", nqn)
    vol = ok(lab, s1, "volume", "show", "v1")
    yield vol
    disconnect(lab, "h1", vol["nqn"])
    ok(lab, s1, "volume", "delete", "v1", "--force")
    ok(lab, s1, "host", "remove", nqn)
    ok(lab, s1, "pool", "delete", "p1")


def test_the_node_runs_the_spdk_data_plane_by_default(lab: Lab, s1: str) -> None:
    st = ok(lab, s1, "status")
    assert st["dataplane"]["name"] == "spdk", st["dataplane"]
    assert (
        "the image carries SPDK" in st["dataplane"]["reason"] or "SPDK answers" in st["dataplane"]["reason"]
    )
    assert "error" not in st["dataplane"], st["dataplane"]
    assert lab.sh(s1, "systemctl is-active nodeos-spdk", check=False).stdout.strip() == "active"
    # The binary the image carries, its own libraries beside it: it runs under the VM's CPU model.
    r = lab.sh(s1, "readlink /usr/bin/nvmf_tgt; cat /usr/lib/nodeos/spdk/BUILD.json")
    assert r.stdout.startswith("/usr/lib/nodeos/spdk/bin/nvmf_tgt") and '"dataplane": "spdk"' in r.stdout


def test_the_drive_is_claimed_for_spdk(lab: Lab, s1: str, drive: dict) -> None:
    rows = {d["address"]: d for d in ok(lab, s1, "drive", "list")}
    assert drive["address"] in rows, rows
    assert rows[drive["address"]]["usable"] is True, rows[drive["address"]]


def test_a_volume_on_spdk_is_exported_and_written(lab: Lab, s1: str, v1: dict) -> None:
    assert v1["state"] == "ready" and v1["size_bytes"] >= 128 * MIB, v1
    addr, nqn = lab.addr("s1"), v1["nqn"]
    assert ("tcp", addr, "4420") in {(li["trtype"], li["traddr"], li["trsvcid"]) for li in v1["listeners"]}
    rc, text = connect(lab, "h1", "tcp", addr, nqn)
    assert rc == 0, text
    dev = device_of(lab, "h1", nqn)
    want = write_random(lab, "h1", dev, 16)
    disconnect(lab, "h1", nqn)
    wait_for("h1 disconnected", lambda: not connected(lab, "h1", nqn))
    rc, text = connect(lab, "h1", "tcp", addr, nqn)
    assert rc == 0, text
    assert read_sum(lab, "h1", device_of(lab, "h1", nqn), 16) == want
    # It is SPDK's: the subsystem is in the target, not in the kernel's nvmet.
    assert lab.sh(s1, "ls /sys/kernel/config/nvmet/subsystems 2>/dev/null", check=False).stdout.split() == []
