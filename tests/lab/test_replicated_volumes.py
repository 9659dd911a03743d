"""Replicated volumes across a three-node cluster (kernel data plane), as an operator and a
GPU node see them: placement on distinct racks, a refusal that explains itself, a volume
created through a node that is not the leader, one multipath device per volume on the host
with one path per replica (one optimized), fio writes with verify through it, and the same
bytes on every replica afterwards."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodeos.lab import Lab
from tests.lab.mirror_helpers import host_paths
from tests.lab.node_helpers import nodeos, ok, wait_daemon

pytestmark = pytest.mark.lab
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")
MIB = 1 << 20
SIZE_MIB = 64
DATA_OFFSET_MIB = 8  # nodeos.dataplane.mirror_names.MIRROR_DATA_OFFSET
# Host settings for fast failover (docs/dataplane.md).
CONNECT_OPTS = "--keep-alive-tmo=5 --ctrl-loss-tmo=30 --reconnect-delay=2"


def _leader(lab: Lab) -> str:
    st = ok(lab, "s1", "cluster", "status")
    return next(m["name"] for m in st["members"] if m["node_id"] == st["leader"])


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> Iterator[dict[str, Any]]:
    for vm in STORAGE:
        wait_daemon(lab, vm)
    for vm in STORAGE:
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    host = lab.spec("h1").hostnqn
    ok(lab, "s1", "host", "add", host)
    made: list[str] = []
    try:
        yield {"host": host, "made": made}
    finally:
        lab.exec("h1", ["nvme", "disconnect-all"], timeout=120)
        for name in made:
            nodeos(lab, "s1", "volume", "revoke", name, "--host", host)
            nodeos(lab, "s1", "volume", "delete", name, "--force")
        nodeos(lab, "s1", "host", "remove", host)
        for vm in STORAGE:
            nodeos(lab, vm, "pool", "delete", "p")


def test_nodes_carry_their_rack_labels(lab: Lab, cluster: dict[str, Any]) -> None:
    nodes = {n["name"]: n for n in ok(lab, "s2", "node", "list")}
    assert {n: nodes[n]["labels"].get("rack") for n in STORAGE} == {"s1": "a", "s2": "b", "s3": "c"}
    assert all(nodes[n]["role"] == "storage" and nodes[n]["pools"] == ["p"] for n in STORAGE)
    assert sum(1 for n in nodes.values() if n["leader"]) == 1


def test_three_replicas_by_rack_are_refused_with_two_racks_and_nothing_changes(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    ok(lab, "s1", "node", "label", "s3", "rack=a")
    try:
        rc, out = nodeos(
            lab, "s2", "volume", "create", "nope", "--size", "64MiB", "--replicas", "3", "--spread", "rack"
        )
        assert rc == 2, out
        msg = out["error"]["message"]
        assert "3 replicas spread by rack need 3 racks" in msg and "2 have: a, b" in msg, msg
        assert all(v["name"] != "nope" for v in ok(lab, "s1", "volume", "list"))
    finally:
        ok(lab, "s1", "node", "label", "s3", "rack=c")


def _md5_on(lab: Lab, vm: str, vol: dict[str, Any]) -> str:
    """md5 of the volume's data on `vm`'s own replica LV (after the mirror's data offset)."""
    lv = lab.sh(vm, f"lvs --noheadings -o lv_path -S lv_name=v_{vol['vol_id']}").stdout.strip()
    assert lv, f"{vm} has no LV for {vol['name']}"
    script = (
        f"dd if={lv} bs=1M skip={DATA_OFFSET_MIB} count={SIZE_MIB} iflag=direct status=none"
        " | md5sum | cut -d' ' -f1"
    )
    return lab.sh(vm, script, timeout=300).stdout.strip()


def _head(lab: Lab, nqn: str) -> str:
    """The host's one block device (multipath head) for `nqn`, or ""."""
    script = f"""
for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  [ "$(cat $s/subsysnqn)" = "{nqn}" ] && ls -d $s/nvme*n1 2>/dev/null | head -1 | xargs -r basename
done"""
    return lab.sh("h1", script).stdout.strip()


def _wait_paths(lab: Lab, nqn: str, n: int, timeout: float = 180) -> tuple[list[dict[str, str]], str]:
    deadline = time.monotonic() + timeout
    while True:
        paths, head = host_paths(lab, nqn), _head(lab, nqn)
        live = [p for p in paths if p["state"] == "live" and p["ana"] in ("optimized", "inaccessible")]
        if len(live) == n and head:
            return paths, head
        if time.monotonic() > deadline:
            raise AssertionError(f"host sees {paths} (head {head!r}) for {nqn}, wanted {n} live paths")
        time.sleep(2)


@pytest.mark.parametrize("replicas", [2, 3])
def test_replicated_volume_is_one_multipath_device_and_every_replica_holds_the_same_bytes(
    lab: Lab, cluster: dict[str, Any], replicas: int
) -> None:
    name = f"r{replicas}"
    console = next(vm for vm in STORAGE if vm != _leader(lab))  # not the leader: forwarded
    vol = ok(
        lab,
        console,
        "volume",
        "create",
        name,
        "--size",
        f"{SIZE_MIB}MiB",
        "--replicas",
        str(replicas),
        "--spread",
        "rack",
    )
    cluster["made"].append(name)
    assert vol["state"] == "ready" and vol["epoch"] == 1
    nodes = [r["node"] for r in vol["replicas"]]
    assert len(set(nodes)) == replicas and all(r["state"] == "in-sync" for r in vol["replicas"])
    racks = {n["name"]: n["labels"]["rack"] for n in ok(lab, "s1", "node", "list")}
    assert len({racks[n] for n in nodes}) == replicas  # distinct racks
    assert vol["primary"] == nodes[0]
    assert sorted({li["node"] for li in vol["listeners"]}) == sorted(nodes)
    assert [r["ana_state"] for r in vol["replicas"]] == ["optimized"] + ["inaccessible"] * (replicas - 1)

    ok(lab, "s1", "volume", "grant", name, "--host", cluster["host"])
    # connect-all against ONE node (not the primary): referrals lead the host to the others
    other = next(n for n in nodes if n != vol["primary"])
    lab.sh("h1", f"nvme connect-all -t tcp -a {lab.addr(other)} -s 8009 {CONNECT_OPTS}", timeout=300)
    paths, head = _wait_paths(lab, vol["nqn"], replicas)
    assert sorted(p["ana"] for p in paths).count("optimized") == 1
    dev = f"/dev/{head}"
    fio = (
        f"fio --name=verify --filename={dev} --rw=randwrite --bs=4k --size={SIZE_MIB // 2}M --direct=1 "
        "--ioengine=libaio --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 --output-format=json"
    )
    res = json.loads(lab.sh("h1", fio, timeout=1200).stdout)
    job = res["jobs"][0]
    assert job["error"] == 0 and job["write"]["io_bytes"] > 0
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
    assert len(set(sums.values())) == 1, sums

    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
    ok(lab, "s1", "volume", "revoke", name, "--host", cluster["host"])
    ok(lab, console, "volume", "delete", name)
    cluster["made"].remove(name)
    for vm in STORAGE:  # nothing of it left on any node
        assert not lab.sh(vm, f"lvs --noheadings -o lv_name -S lv_name=v_{vol['vol_id']}").stdout.strip()
        assert lab.exec(vm, ["test", "-e", f"/sys/kernel/config/nvmet/subsystems/{vol['nqn']}"]).rc != 0
