"""The kernel data plane in the lab: nvmet + LVM thin in a storage VM, stock nvme-cli on
GPU-node VMs, real kernel on both sides. One lab for the module (s1 with 2 drives, h1, h2).

The daemon is stopped on s1 for this module: these tests drive nodeos.dataplane.kernel
directly, and a running nodeosd would reconcile the node to its own (empty) state.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator

import pytest

from nodeos_devtools.lab import Lab
from tests.lab.dataplane_helpers import (
    connect,
    connected,
    device_of,
    disconnect,
    discover,
    dp,
    read_sum,
    spec_code,
    wait_for,
    write_random,
)
from tests.lab.node_helpers import wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

# The primitives under the product's own paths (test_node_kernel.py drives them through the
# daemon in CI): ~3 min of CI's 60, with NODEOS_LAB_FULL=1.
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
LAB = "one"  # shared (tests/lab/shared_labs.py): s1 with 2 drives, h1, h2

V1 = "0f3c2a1b9d8e4f70a1b2c3d4e5f60718"
NQN1 = f"nqn.2014-08.io.nodeos:vol:{uuidlib.UUID(V1)}"
UUID1 = str(uuidlib.UUID(V1))
C1 = "7a6b5c4d3e2f40118293a4b5c6d7e8f9"
NQN_C1 = f"nqn.2014-08.io.nodeos:vol:{uuidlib.UUID(C1)}"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def s1(lab: Lab) -> Iterator[str]:
    # A generous bound: under TCG on a busy host the stop may wait for a slow start to finish.
    lab.sh("s1", "systemctl stop nodeosd.service 2>/dev/null || true", timeout=900)
    yield "s1"
    # The lab is shared: hosts disconnected, nodeosd back as the next module expects it.
    for host in lab.host_vms:
        lab.sh(host, "nvme disconnect-all >/dev/null 2>&1 || true", timeout=300)
    lab.sh("s1", "systemctl start --no-block nodeosd.service")
    wait_daemon(lab, "s1")


@pytest.fixture(scope="module")
def drives(lab: Lab, s1: str) -> list[str]:
    got = dp(lab, s1, "from nodeos.hw.nvme import NvmeCli\nout([x.device for x in NvmeCli().inventory()])")
    assert len(got) == 2, got
    return sorted(got)


@pytest.fixture(scope="module")
def pool(lab: Lab, s1: str, drives: list[str]) -> str:
    info = dp(lab, s1, f"out(d.create_pool('p1', {drives!r}))")
    assert "error" not in info, info
    return "p1"


@pytest.fixture(scope="module")
def exported(lab: Lab, s1: str, pool: str) -> str:
    addr = lab.addr("s1")
    h1 = lab.spec("h1").hostnqn
    r = dp(
        lab,
        s1,
        f"""
d.create_volume('p1', {V1!r}, 256 * 1024 * 1024)
out(d.apply_export({spec_code(NQN1, V1, addr, [(h1, None)], uuid=UUID1)}))""",
    )
    assert "error" not in r, r
    return NQN1


def test_inventory_lists_both_drives_healthy(lab: Lab, s1: str) -> None:
    got = dp(lab, s1, "from nodeos.hw.nvme import NvmeCli\nout(NvmeCli().inventory())")
    assert sorted(d["serial"] for d in got) == sorted(lab.serials("s1"))
    for d in got:
        assert d["model"] == "QEMU NVMe Ctrl" and d["size_bytes"] == 512 * MIB
        assert d["smart"]["critical_warning"] == 0 and d["health"] == []


def test_rdma_inventory_sees_the_soft_roce_port(lab: Lab, s1: str) -> None:
    got = dp(lab, s1, "from nodeos.hw.rdma import inventory\nsrc, ports = inventory()\nout([src, ports])")
    source, ports = got
    assert source == "pyverbs"
    live = [p for p in ports if p["state"] == "ACTIVE" and p["link_layer"] == "Ethernet"]
    assert live, ports
    links = lab.exec(s1, ["ip", "-o", "link"], check=True).stdout
    assert all(p["netdev"] and f" {p['netdev']}:" in links for p in live)


def test_pool_spans_all_drives_and_is_idempotent(lab: Lab, s1: str, drives: list[str], pool: str) -> None:
    again = dp(lab, s1, f"out(d.create_pool('p1', {drives!r}))")
    assert again["devices"] == drives
    assert 0 < again["free_bytes"] <= again["size_bytes"] <= 2 * 512 * MIB
    pools = dp(lab, s1, "out(d.list_pools())")
    assert [p["pool_id"] for p in pools] == ["p1"]


def test_only_the_granted_host_discovers_the_volume(lab: Lab, exported: str) -> None:
    addr = lab.addr("s1")
    assert exported in discover(lab, "h1", addr, "8009")
    assert exported in discover(lab, "h1", addr, "4420")
    assert exported not in discover(lab, "h2", addr, "8009")
    assert exported not in discover(lab, "h2", addr, "4420")


def test_ungranted_host_cannot_connect(lab: Lab, exported: str) -> None:
    rc, text = connect(lab, "h2", "tcp", lab.addr("s1"), exported)
    assert rc != 0, text
    assert not connected(lab, "h2", exported)


def test_tcp_write_disconnect_reconnect_same_checksum(lab: Lab, exported: str) -> None:
    addr = lab.addr("s1")
    rc, text = connect(lab, "h1", "tcp", addr, exported)
    assert rc == 0, text
    dev = device_of(lab, "h1", exported)
    written = write_random(lab, "h1", dev, 8)
    disconnect(lab, "h1", exported)
    wait_for("h1 to drop the controller", lambda: not connected(lab, "h1", exported), 60)
    rc, text = connect(lab, "h1", "tcp", addr, exported)
    assert rc == 0, text
    assert read_sum(lab, "h1", device_of(lab, "h1", exported), 8) == written
    lab.sh("h1", f"sha256sum < /tmp/pattern > /tmp/pattern.sum && echo {written} > /tmp/written")


def test_rdma_reads_what_tcp_wrote(lab: Lab, exported: str) -> None:
    disconnect(lab, "h1", exported)
    rc, text = connect(lab, "h1", "rdma", lab.addr("s1"), exported)
    assert rc == 0, text
    written = lab.sh("h1", "cat /tmp/written").stdout.strip()
    assert read_sum(lab, "h1", device_of(lab, "h1", exported), 8) == written
    disconnect(lab, "h1", exported)


def test_resize_grows_the_device_on_the_host(lab: Lab, s1: str, exported: str) -> None:
    rc, text = connect(lab, "h1", "tcp", lab.addr("s1"), exported)
    assert rc == 0, text
    dev = device_of(lab, "h1", exported)
    size = lambda: int(lab.sh("h1", f"blockdev --getsize64 {dev}").stdout)  # noqa: E731
    assert size() == 256 * MIB
    r = dp(lab, s1, f"out(d.resize_volume('p1', {V1!r}, 384 * 1024 * 1024))")
    assert r["size_bytes"] == 384 * MIB
    wait_for("the host to see the new size", lambda: size() == 384 * MIB, 60)


def test_delete_of_an_exported_volume_is_refused(lab: Lab, s1: str, exported: str) -> None:
    r = dp(lab, s1, f"d.delete_volume('p1', {V1!r})\nout('deleted')")
    assert r["error"] == "OperationFailed" and exported in r["message"]
    assert V1 in [v["vol_id"] for v in dp(lab, s1, "out(d.list_volumes('p1'))")]


def test_qos_is_refused_clearly(lab: Lab, s1: str, exported: str) -> None:
    h1 = lab.spec("h1").hostnqn
    spec = spec_code(NQN1, V1, lab.addr("s1"), [(h1, None)], uuid=UUID1, qos_iops=1000)
    r = dp(lab, s1, f"out(d.apply_export({spec}))")
    assert r["error"] == "NotSupported" and "not supported by the kernel data plane" in r["message"]


def test_snapshot_and_clone_give_the_snapshots_data(lab: Lab, s1: str, exported: str) -> None:
    dev = device_of(lab, "h1", exported)
    before = write_random(lab, "h1", dev, 4, seek_mib=16)
    r = dp(lab, s1, f"out(d.snapshot_volume('p1', {V1!r}, 'snap1'))")
    assert r["kind"] == "snapshot" and r["origin"] == V1
    after = write_random(lab, "h1", dev, 4, seek_mib=16)
    assert after != before
    h1 = lab.spec("h1").hostnqn
    r = dp(
        lab,
        s1,
        f"""
out(d.clone_snapshot('p1', 'snap1', {C1!r}))""",
    )
    assert r["kind"] == "clone" and r["origin"] == "snap1" and r["size_bytes"] == 384 * MIB
    uuid_c = str(uuidlib.UUID(C1))
    spec = spec_code(
        NQN_C1, C1, lab.addr("s1"), [(h1, None)], uuid=uuid_c, serial="NODEOSLAB0002", rdma=False
    )
    r = dp(lab, s1, f"out(d.apply_export({spec}))")
    assert "error" not in r, r
    rc, text = connect(lab, "h1", "tcp", lab.addr("s1"), NQN_C1)
    assert rc == 0, text
    cdev = device_of(lab, "h1", NQN_C1)
    assert read_sum(lab, "h1", cdev, 4, skip_mib=16) == before
    assert read_sum(lab, "h1", dev, 4, skip_mib=16) == after
    disconnect(lab, "h1", NQN_C1)


def test_revoke_disconnects_the_host_and_refuses_it(lab: Lab, s1: str, exported: str) -> None:
    assert connected(lab, "h1", exported)
    r = dp(lab, s1, f"out(d.apply_export({spec_code(NQN1, V1, lab.addr('s1'), [], uuid=UUID1)}))")
    assert r["hosts"] == []
    wait_for("h1's controller to go down", lambda: not connected(lab, "h1", exported), 90)
    disconnect(lab, "h1", exported)
    rc, _ = connect(lab, "h1", "tcp", lab.addr("s1"), exported)
    assert rc != 0
    assert exported not in discover(lab, "h1", lab.addr("s1"), "8009")


def test_dhchap_wrong_key_refused_right_key_connects(lab: Lab, s1: str, exported: str) -> None:
    h2 = lab.spec("h2").hostnqn
    key = lab.exec("h2", ["nvme", "gen-dhchap-key", "-m", "1", "-n", h2], check=True).stdout.strip()
    wrong = lab.exec("h2", ["nvme", "gen-dhchap-key", "-m", "1", "-n", h2], check=True).stdout.strip()
    assert key.startswith("DHHC-1:") and key != wrong
    r = dp(lab, s1, f"out(d.apply_export({spec_code(NQN1, V1, lab.addr('s1'), [(h2, key)], uuid=UUID1)}))")
    assert r["hosts"] == [h2]
    rc, text = connect(lab, "h2", "tcp", lab.addr("s1"), exported, f"--dhchap-secret={wrong}")
    assert rc != 0, text
    rc, text = connect(lab, "h2", "tcp", lab.addr("s1"), exported, f"--dhchap-secret={key}")
    assert rc == 0, text
    assert connected(lab, "h2", exported)
    disconnect(lab, "h2", exported)


def test_teardown_leaves_nothing(lab: Lab, s1: str, exported: str) -> None:
    r = dp(
        lab,
        s1,
        f"""
for nqn in ({NQN1!r}, {NQN_C1!r}):
    d.remove_export(nqn)
    d.remove_export(nqn)
for v in ({C1!r}, 'snap1', {V1!r}):
    d.delete_volume('p1', v)
    d.delete_volume('p1', v)
d.delete_pool('p1')
d.delete_pool('p1')
import os
root = '/sys/kernel/config/nvmet'
out({{k: sorted(os.listdir(f'{{root}}/{{k}}')) for k in ('subsystems', 'ports', 'hosts')}}
    | {{'pools': d.list_pools(), 'volumes': d.list_volumes()}})""",
    )
    assert r == {"subsystems": [], "ports": [], "hosts": [], "pools": [], "volumes": []}
