"""Issue 2 acceptance in the lab: drives, nodeosd, NVMe/TCP + NVMe/RDMA, kill/start, cut/heal."""

from __future__ import annotations

import json
import time

import pytest

from nodeos.errors import OperationFailed
from nodeos_devtools.lab import Lab, demo
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

# With NODEOS_LAB_FULL=1 since 2026-11-29: CI runs past its 60 minutes with lab `one` beside
# cluster3 (docs/testing.md); CI keeps the replicated cluster (test_replicated_volumes.py also
# checks an ungranted host) until CI's own figures show room for this lab again.
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
LAB = "one"  # shared (tests/lab/shared_labs.py): s1 with 2 drives, h1, h2


def test_storage_vm_sees_its_drives_with_the_lab_serials(lab: Lab) -> None:
    r = lab.exec("s1", ["nvme", "list", "-o", "json"], check=True)
    serials = sorted(d["SerialNumber"].strip() for d in json.loads(r.stdout)["Devices"])
    assert serials == sorted(lab.serials("s1")) == ["NODEOS-s1-0", "NODEOS-s1-1"]


def test_every_vm_has_its_own_host_identity_address_and_rxe(lab: Lab) -> None:
    seen = {}
    for vm in lab.vms:
        nqn = lab.exec(vm, ["cat", "/etc/nvme/hostnqn"], check=True).stdout.strip()
        hostid = lab.exec(vm, ["cat", "/etc/nvme/hostid"], check=True).stdout.strip()
        assert nqn == lab.spec(vm).hostnqn and hostid == lab.spec(vm).hostid
        seen[vm] = (nqn, hostid)
        addrs = lab.exec(vm, ["ip", "-j", "addr", "show", "eth0"], check=True).stdout
        assert lab.addr(vm) in addrs
        assert lab.addr(vm).startswith("198.1")
        rdma = lab.exec(vm, ["rdma", "link", "show", "rxe0/1"], check=True).stdout
        assert "ACTIVE" in rdma and "netdev eth0" in rdma
    assert len({n for n, _ in seen.values()}) == len(seen)
    assert len({h for _, h in seen.values()}) == len(seen)
    mods = lab.exec("s1", ["cat", "/proc/modules"], check=True).stdout
    for m in ("nvmet", "nvmet_tcp", "nvmet_rdma", "rdma_rxe", "crc32_generic"):
        assert f"\n{m} " in "\n" + mods, m
    mp = lab.exec("h1", ["cat", "/sys/module/nvme_core/parameters/multipath"], check=True).stdout.strip()
    assert mp == "Y"
    lab.exec("h1", ["fio", "--version"], check=True)
    # A GPU node runs stock Linux tools, never nodeosd.
    assert lab.exec("h1", ["systemctl", "is-active", "nodeosd"]).stdout.strip() != "active"


def _main_pid(lab: Lab) -> int:
    r = lab.exec("s1", ["systemctl", "show", "-P", "MainPID", "nodeosd.service"], check=True)
    return int(r.stdout.strip())


def _active(lab: Lab) -> str:
    return lab.exec("s1", ["systemctl", "is-active", "nodeosd.service"]).stdout.strip()


def test_nodeosd_is_active_under_systemd_and_restarts_when_killed(lab: Lab) -> None:
    assert _active(lab) == "active", lab.exec("s1", ["systemctl", "status", "nodeosd", "--no-pager"]).stdout
    pid = _main_pid(lab)
    assert pid > 0
    lab.exec("s1", ["kill", "-9", str(pid)], check=True)
    # Generous bound, polled: a Python daemon start under an emulated CPU on a busy host is slow.
    deadline = time.monotonic() + 900
    while True:
        new = _main_pid(lab)
        if new not in (0, pid) and _active(lab) == "active":
            break
        assert time.monotonic() < deadline, f"nodeosd not back: MainPID {new}, {_active(lab)}"
        time.sleep(1)
    restarts = lab.exec("s1", ["systemctl", "show", "-P", "NRestarts", "nodeosd.service"], check=True)
    assert int(restarts.stdout.strip()) >= 1


def test_gpu_node_connects_over_tcp_and_rdma_and_data_round_trips(lab: Lab) -> None:
    exporter = demo.KernelTargetExporter()
    exp = exporter.export(lab, "s1", name="t1", size_mib=128, hostnqn=lab.spec("h1").hostnqn)
    try:
        dev = demo.connect(lab, "h1", exp, "tcp")
        paths = lab.exec("h1", ["nvme", "list-subsys", "-o", "json"], check=True).stdout
        assert "tcp" in paths and exp.nqn in paths
        sha = demo.write_random(lab, "h1", dev, mib=8)
        assert demo.read_sha(lab, "h1", dev, mib=8) == sha
        demo.disconnect(lab, "h1", exp.nqn)

        dev = demo.connect(lab, "h1", exp, "rdma")
        paths = lab.exec("h1", ["nvme", "list-subsys", "-o", "json"], check=True).stdout
        assert "rdma" in paths and "tcp" not in paths
        assert demo.read_sha(lab, "h1", dev, mib=8) == sha
        sha2 = demo.write_random(lab, "h1", dev, mib=8, seek_mib=8)
        assert demo.read_sha(lab, "h1", dev, mib=8, skip_mib=8) == sha2
        demo.disconnect(lab, "h1", exp.nqn)
        # What the host wrote is on the storage VM's volume, byte for byte.
        assert demo.read_sha(lab, "s1", exp.device, mib=8) == sha
        assert demo.read_sha(lab, "s1", exp.device, mib=8, skip_mib=8) == sha2
        assert sha != sha2
    finally:
        lab.exec("h1", ["nvme", "disconnect", "-n", exp.nqn])
        exporter.unexport(lab, "s1", exp)


def _ping(lab: Lab, src: str, dst: str) -> bool:
    return lab.exec(src, ["ping", "-c", "1", "-W", "1", lab.addr(dst)], timeout=30).rc == 0


def test_cut_makes_a_vm_unreachable_and_heal_brings_it_back(lab: Lab) -> None:
    assert _ping(lab, "h1", "s1")
    lab.cut("s1")
    try:
        assert [s["state"] for s in lab.status()["vms"] if s["name"] == "s1"] == ["cut"]
        assert not _ping(lab, "h1", "s1")
        assert not _ping(lab, "s1", "h1")
    finally:
        lab.heal("s1")
    deadline = time.monotonic() + 60
    while not _ping(lab, "h1", "s1"):
        assert time.monotonic() < deadline, "s1 still unreachable after heal"
    assert [s["state"] for s in lab.status()["vms"] if s["name"] == "s1"] == ["running"]


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)  # lab.kill/start: the failover test uses them in CI
def test_kill_and_start_keep_the_drive_contents(lab: Lab) -> None:
    serial = lab.serials("s1")[1]
    dev = demo.drive_path(serial)
    sha = demo.write_random(lab, "s1", dev, mib=4, seek_mib=100)
    old_pid = lab.spec("s1").pid
    lab.kill("s1")
    assert [s["state"] for s in lab.status()["vms"] if s["name"] == "s1"] == ["stopped"]
    with pytest.raises(OperationFailed, match="not running"):
        lab.exec("s1", ["true"])
    lab.start("s1")
    assert lab.spec("s1").pid != old_pid
    assert demo.read_sha(lab, "s1", dev, mib=4, skip_mib=100) == sha
    r2 = lab.exec("s1", ["nvme", "list", "-o", "json"], check=True)
    assert serial in r2.stdout
