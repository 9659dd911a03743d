"""Replicated volumes across a three-node cluster (kernel data plane), as an operator and a
GPU node see them: placement on distinct racks, a refusal that explains itself, a volume
created through a node that is not the leader, one multipath device per volume on the host
with one path per replica (one optimized), fio writes with verify through it, and the same
bytes on every replica afterwards."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from nodeos.agent.onestep import KNOB, ONE_STEP, PASSES
from nodeos_devtools.lab import Lab, fio
from tests.lab.dataplane_helpers import connect, discover
from tests.lab.mirror_helpers import host_paths
from tests.lab.node_helpers import nodeos, ok, start_crashing_daemon, start_unit, wait_daemon, wait_dead
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

pytestmark = pytest.mark.lab
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")
MIB = 1 << 20
SIZE_MIB = 64
# 4k random writes and their verify: 1,024 of each (a 4k I/O through md and a remote leg costs
# ~30 ms under TCG; 32 MiB took 11 min). The md5s below compare every byte of every replica.
FIO_MIB = 4
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
    # All three at once, as operators' scripts do: one after another took 4 min under TCG.
    with ThreadPoolExecutor(len(STORAGE)) as pool:
        list(pool.map(lambda vm: ok(lab, vm, "pool", "create", "p", "--drives", "all"), STORAGE))
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
        with ThreadPoolExecutor(len(STORAGE)) as pool:
            list(pool.map(lambda vm: nodeos(lab, vm, "pool", "delete", "p"), STORAGE))


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
  if [ "$(cat $s/subsysnqn)" = "{nqn}" ]; then ls -d $s/nvme*n1 2>/dev/null | head -1 | xargs -r basename; fi
done"""
    return lab.sh("h1", script).stdout.strip()


def _wait_paths(lab: Lab, nqn: str, n: int, timeout: float = 180) -> tuple[list[dict[str, str]], str]:
    deadline = time.monotonic() + timeout
    while True:
        paths, head = host_paths(lab, nqn), _head(lab, nqn)
        live = [p for p in paths if p["state"] == "live" and p["ana"] in ("optimized", "inaccessible")]
        # One optimized path: a path reads inaccessible for a moment while the primary moves (a
        # starved lab calls a node down; the failover's ANA change reaches the host after it).
        if len(live) == n and head and [p["ana"] for p in live].count("optimized") == 1:
            return paths, head
        if time.monotonic() > deadline:
            raise AssertionError(
                f"host sees {paths} (head {head!r}) for {nqn}, wanted {n} live paths, one optimized"
            )
        time.sleep(2)


# 3 replicas only with NODEOS_LAB_FULL=1: CI's 60-minute budget (the demo shows a 3-replica volume).
@pytest.mark.parametrize(
    "replicas", [2, pytest.param(3, marks=pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL))]
)
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

    # Not granted yet: no node lists it to the host, and a connect to its primary is refused.
    for vm in nodes:
        assert vol["nqn"] not in discover(lab, "h1", lab.addr(vm), "8009"), vm
    rc, out = connect(lab, "h1", "tcp", lab.addr(vol["primary"]), vol["nqn"])
    assert rc != 0 and not host_paths(lab, vol["nqn"]), out

    ok(lab, "s1", "volume", "grant", name, "--host", cluster["host"])
    # connect-all against ONE node (not the primary): referrals lead the host to the others. The
    # 3-replica volume over RDMA (issue 28: RDMA discovery ports carried no referral, and
    # `connect-all -t rdma` found one path of three).
    transport = "rdma" if replicas == 3 else "tcp"
    other = next(n for n in nodes if n != vol["primary"])
    lab.sh("h1", f"nvme connect-all -t {transport} -a {lab.addr(other)} -s 8009 {CONNECT_OPTS}", timeout=300)
    paths, head = _wait_paths(lab, vol["nqn"], replicas)
    assert sorted(p["ana"] for p in paths).count("optimized") == 1
    assert {p["transport"] for p in paths} == {transport}, paths
    for vm in nodes:  # one path to every replica's node
        assert [p for p in paths if f"traddr={lab.addr(vm)}," in p["address"]], (vm, paths)
    dev = f"/dev/{head}"
    job = fio.run(
        lab,
        "h1",
        "verify",
        f"--filename={dev} --rw=randwrite --bs=4k --size={FIO_MIB}M --direct=1 --ioengine=libaio "
        "--iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1",
    )
    assert job["error"] == 0 and job["write"]["io_bytes"] > 0
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
    # Every replica holds what the host reads: equal replicas alone also passed when nvmet served
    # a regular file squatting /dev/md127 and neither replica got a write (2026-11-29).
    read = f"dd if={dev} bs=1M count={SIZE_MIB} iflag=direct status=none | md5sum | cut -d' ' -f1"
    sums["h1"] = lab.sh("h1", read, timeout=300).stdout.strip()
    assert len(set(sums.values())) == 1, sums

    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
    ok(lab, "s1", "volume", "revoke", name, "--host", cluster["host"])
    ok(lab, console, "volume", "delete", name)
    cluster["made"].remove(name)
    for vm in STORAGE:  # nothing of it left on any node
        assert not lab.sh(vm, f"lvs --noheadings -o lv_name -S lv_name=v_{vol['vol_id']}").stdout.strip()
        assert lab.exec(vm, ["test", "-e", f"/sys/kernel/config/nvmet/subsystems/{vol['nqn']}"]).rc != 0


def _md5_region(lab: Lab, vm: str, dev: str, skip_mib: int, count_mib: int) -> str:
    script = f"dd if={dev} bs=1M skip={skip_mib} count={count_mib} iflag=direct status=none | md5sum"
    return lab.sh(vm, script, timeout=300).stdout.split()[0]


def _check_freeze_on_the_kernel(lab: Lab, vol: dict[str, Any], nodes: list[str], dev: str) -> None:
    """The primitive the snapshot relies on, on the real md: once frozen every leg holds the
    same bytes (acknowledged writes are everywhere), a host's write waits, a read of md passes."""
    from nodeos.dataplane.mirror_names import mirror_id_for

    call = "python3 -c 'from nodeos.dataplane.kernel.mirror import MdMirrors; MdMirrors().{}(\"{}\")'"
    mid = mirror_id_for(vol["uuid"])
    lab.sh(vol["primary"], call.format("freeze_writes", mid))
    try:
        sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
        assert len(set(sums.values())) == 1, sums
        write = f"dd if=/dev/urandom of={dev} bs=4k count=1 seek=100 oflag=direct conv=fsync"
        lab.sh("h1", f"setsid -f {write} </dev/null >/dev/null 2>&1")
        # Reads pass md (on the primary itself: through nvmet a held write also holds the reads
        # queued behind it on the same I/O queue, seen in the lab).
        md = f"/dev/md/{mid}"
        lab.sh(vol["primary"], f"dd if={md} of=/dev/null bs=1M count=4 iflag=direct status=none", timeout=60)
        time.sleep(3)  # a bounded negative check: the write is still held after 3 s
        assert lab.exec("h1", ["pgrep", "-x", "dd"]).rc == 0, "a write went through a frozen mirror"
    finally:
        lab.sh(vol["primary"], call.format("thaw_writes", mid))
    lab.sh("h1", "while pgrep -x dd >/dev/null; do sleep 1; done", timeout=120)


# ~15 min of the lab under TCG: with NODEOS_LAB_FULL=1 (CI's 60 minutes; the kernel data plane's
# freeze primitive has its own lab check here and the snapshot's decisions are simulated in CI).
@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
@pytest.mark.parametrize("hold", [PASSES, ONE_STEP])
def test_snapshot_taken_while_fio_writes_is_one_point_on_every_replica_and_its_clone_holds_it(
    lab: Lab, cluster: dict[str, Any], hold: str
) -> None:
    """A 2-replica volume: a known pattern written and flushed, then fio writing elsewhere WHILE
    the snapshot is taken, then the pattern overwritten. The clone (2 replicas, its own md
    array over thin clones of the replica snapshots) holds the same bytes on both nodes and the
    pattern, seen from the host through its own multipath device. Both ways of holding the
    writes: the phases of agent passes, and the primary's one step (nodeos/agent/onestep.py),
    whose journal line must say every leg was taken in one step (its held ms printed)."""
    ok(lab, "s1", "cluster", "kv", "put", KNOB, hold)
    try:
        _snapshot_under_fio(lab, cluster, hold)
    finally:
        nodeos(lab, "s1", "cluster", "kv", "delete", KNOB)


def _one_step_line(lab: Lab, vm: str, since: str) -> str:
    """The primary's journal line of the one-step snapshot snap1 (taken or failed), "" if none."""
    out = lab.sh(
        vm, f"journalctl -u nodeosd --since '{since}' --no-pager -o cat | grep 'snapshot snap1: ' || true"
    )
    return next((ln for ln in out.stdout.splitlines() if "one step" in ln or "one-step" in ln), "")


def _snapshot_under_fio(lab: Lab, cluster: dict[str, Any], hold: str) -> None:
    host, pat_mib = cluster["host"], 16
    vol = ok(lab, "s1", "volume", "create", "snapsrc", "--size", f"{SIZE_MIB}MiB", "--replicas", "2")
    cluster["made"].append("snapsrc")
    nodes = [r["node"] for r in vol["replicas"]]
    ok(lab, "s1", "volume", "grant", "snapsrc", "--host", host)
    lab.sh("h1", f"nvme connect-all -t tcp -a {lab.addr(vol['primary'])} -s 8009 {CONNECT_OPTS}", timeout=300)
    _, head = _wait_paths(lab, vol["nqn"], 2)
    dev = f"/dev/{head}"
    pattern = lab.sh(
        "h1",
        f"dd if=/dev/urandom of=/root/pat bs=1M count={pat_mib} status=none; "
        f"dd if=/root/pat of={dev} bs=1M oflag=direct conv=fsync status=none; md5sum < /root/pat",
        timeout=300,
    ).stdout.split()[0]
    during = (
        f"fio --name=during --filename={dev} --rw=randwrite --bs=4k --offset={pat_mib}M "
        f"--size={SIZE_MIB - pat_mib}M --direct=1 --ioengine=libaio --thread --iodepth=4 --time_based "
        "--runtime=600 "
        "--output-format=json --output=/root/fio.json"
    )
    lab.sh("h1", f"rm -f /root/fio.json; setsid -f {during} </dev/null >/dev/null 2>&1", timeout=60)
    lab.sh("h1", "for i in $(seq 60); do pgrep -x fio && break; sleep 1; done; pgrep -x fio", timeout=90)

    # A snapshot needs every replica in sync (the map refuses it otherwise, naming them): as an
    # operator would, wait for that first. On 2026-12-03 (a slow TCG day) s2's replica was not in
    # sync a few seconds after the create; how long it took is printed.
    t0, states = time.monotonic(), []
    while time.monotonic() - t0 < 600:
        states = [r["state"] for r in ok(lab, "s1", "volume", "show", "snapsrc")["replicas"]]
        if all(st == "in-sync" for st in states):
            break
        time.sleep(5)
    print(f"replicas in sync {time.monotonic() - t0:.0f} s after fio started: {states}")
    since = lab.sh(vol["primary"], "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    rc, snap = nodeos(lab, "s2", "volume", "snapshot", "snapsrc", "snap1", timeout=600)
    if rc != 0:  # the primary's journal says why (the console only that it was rolled back)
        journal = f"journalctl -u nodeosd --since '{since}' --no-pager -o cat"
        why = lab.sh(vol["primary"], f"{journal} | grep -i 'snap1\\|frozen\\|thaw' || true").stdout
        pytest.fail(f"nodeos volume snapshot -> {rc}: {snap}\nthe primary's journal:\n{why[-4000:]}")
    cluster["made"].insert(0, "snap1")  # the fixture deletes leftovers in this order
    assert snap["state"] == "ready" and sorted(snap["nodes"]) == sorted(nodes), snap
    line = _one_step_line(lab, vol["primary"], since)
    print(f"snapshot hold ({hold}): {line or 'no one-step line in the primary journal'}")
    if hold == ONE_STEP:
        assert "every leg taken in one step" in line, line or "the primary did not take the one step"
    else:
        assert line == "", line
    assert lab.exec("h1", ["pgrep", "-x", "fio"]).rc == 0, "fio ended before the snapshot was ready"
    shown = ok(lab, "s1", "volume", "show", "snapsrc")
    assert shown["freeze"] is None and shown["snapshots"] == ["snap1"]
    # the primary let the writes go: md's suspend range is empty again
    lab.sh(vol["primary"], 'for f in /sys/block/md*/md/suspend_hi; do [ "$(cat $f)" = 0 ]; done')
    lab.sh("h1", f"dd if=/dev/zero of={dev} bs=1M count={pat_mib} oflag=direct conv=fsync status=none")
    # fio wrote all along; it is stopped here (SIGINT: it ends its job and writes its report)
    # rather than left to run out its upper bound.
    lab.sh("h1", "pkill -INT -x fio || true; while pgrep -x fio >/dev/null; do sleep 2; done", timeout=600)
    job = fio.report_job(lab.sh("h1", "cat /root/fio.json").stdout)  # stopped by SIGINT: a notice first
    assert job["error"] == 0 and job["write"]["io_bytes"] > 0, job

    _check_freeze_on_the_kernel(lab, vol, nodes, dev)

    clone = ok(lab, "s3", "volume", "clone", "snap1", "clone1", timeout=600)
    cluster["made"].insert(0, "clone1")
    assert clone["state"] == "ready" and clone["replica_count"] == 2
    assert sorted(r["node"] for r in clone["replicas"]) == sorted(nodes)
    assert all(r["state"] == "in-sync" for r in clone["replicas"]), clone
    sums = {vm: _md5_on(lab, vm, clone) for vm in nodes}
    assert len(set(sums.values())) == 1, sums  # one point of the write stream on both replicas
    ok(lab, "s1", "volume", "grant", "clone1", "--host", host)
    lab.sh(
        "h1", f"nvme connect-all -t tcp -a {lab.addr(clone['primary'])} -s 8009 {CONNECT_OPTS}", timeout=300
    )
    _, chead = _wait_paths(lab, clone["nqn"], 2)
    assert _md5_region(lab, "h1", f"/dev/{chead}", 0, pat_mib) == pattern
    assert _md5_region(lab, "h1", dev, 0, pat_mib) != pattern  # the origin moved on

    rc, out = nodeos(lab, "s1", "volume", "clone", "snap1", "one", "--replicas", "1")
    assert rc == 2 and out["error"]["field"] == "replicas" and out["error"]["allowed"] == [2], out
    lab.sh("h1", f"nvme disconnect -n {clone['nqn']}; nvme disconnect -n {vol['nqn']}", timeout=120)
    for name in ("clone1", "snapsrc"):
        ok(lab, "s1", "volume", "revoke", name, "--host", host)
    ok(lab, "s1", "volume", "delete", "clone1")
    cluster["made"].remove("clone1")
    ok(lab, "s1", "volume", "delete", "snap1")
    cluster["made"].remove("snap1")
    ok(lab, "s1", "volume", "delete", "snapsrc")
    cluster["made"].remove("snapsrc")
    for vm in nodes:  # every replica snapshot and clone leg is gone
        assert not lab.sh(vm, "lvs --noheadings -o lv_name -S 'lv_name=~^v_'").stdout.strip()


def _suspend_hi(lab: Lab, vm: str, vol: dict[str, Any]) -> str:
    """md's suspend_hi of the volume's mirror on `vm`; "0" also when no such array runs there."""
    from nodeos.dataplane.mirror_names import mirror_id_for

    md = f"/dev/md/{mirror_id_for(vol['uuid'])}"
    script = (
        f'd=$(readlink -f {md} || true); f=/sys/block/$(basename "${{d:-none}}")/md/suspend_hi; '
        'if [ -e "$f" ]; then cat "$f"; else echo 0; fi'
    )
    return lab.sh(vm, script).stdout.strip()


@pytest.mark.skip(
    reason="to be reworked for leases: nodeosd restarted by hand under TCG outlasts the lab's 8 s "
    "lease, so the volume fails over before the snapshot and the crash point is never reached "
    "(session note 2026-11-26)"
)
def test_a_primary_killed_with_writes_frozen_thaws_at_start_once_the_map_let_go(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    """md's suspend range is kernel state: it outlives nodeosd. A primary that dies right after
    freezing finds it at its next start and lets the writes go (the snapshot was deleted). Its
    lease runs out while it is dead, so the cluster has meanwhile moved the primary to the other
    replica: the restarted node lets go of its frozen array (thawed, or stopped as it demotes)
    and the volume is served by the new primary."""
    vol = ok(lab, "s1", "volume", "create", "frz", "--size", f"{SIZE_MIB}MiB", "--replicas", "2")
    cluster["made"].append("frz")
    prim = vol["primary"]
    console = next(r["node"] for r in vol["replicas"] if r["node"] != prim)
    start_crashing_daemon(lab, prim, "snapshot.freeze:frozen")
    try:
        lab.exec(console, ["timeout", "30", "nodeos", "volume", "snapshot", "frz", "lost"], timeout=60)
        wait_dead(lab, prim, timeout=120)
        assert _suspend_hi(lab, prim, vol) != "0"  # frozen, and nobody left to thaw it
        # Deleted here, or already dropped by the failover the dead primary's lease led to.
        rc, out = nodeos(lab, console, "volume", "delete", "lost")
        assert rc == 0 or out["error"]["code"] == "not_found", out
        assert ok(lab, console, "volume", "show", "frz")["freeze"] is None
    finally:
        start_unit(lab, prim)
    deadline = time.monotonic() + 300
    while _suspend_hi(lab, prim, vol) != "0":
        assert time.monotonic() < deadline, "the restarted node did not let go of its frozen mirror"
        time.sleep(2)
    assert all(v["name"] != "lost" for v in ok(lab, prim, "volume", "list"))
    shown = ok(lab, console, "volume", "show", "frz")
    assert shown["state"] == "ready" and shown["freeze"] is None, shown
    ok(lab, console, "volume", "delete", "frz")
    cluster["made"].remove("frz")


def _lv_md5(lab: Lab, vm: str, vol: dict[str, Any], size_mib: int) -> str:
    lv = lab.sh(vm, f"lvs --noheadings -o lv_path -S lv_name=v_{vol['vol_id']}").stdout.strip()
    assert lv, f"{vm} has no LV for {vol['name']}"
    return _md5_region(lab, vm, lv, DATA_OFFSET_MIB, size_mib)


def _wait_host_size(lab: Lab, dev: str, want: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while (have := int(lab.sh("h1", f"blockdev --getsize64 {dev}").stdout.strip() or 0)) != want:
        assert time.monotonic() < deadline, f"the host sees {dev} at {have} bytes, not {want}"
        time.sleep(2)


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_a_replicated_volume_grows_on_every_replica_and_the_host_sees_it_on_one_device(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    """Grow (issue 8): the host's multipath device takes the new size with every path live, data
    written before stays, the new space takes writes with verify, and every leg holds the same bytes."""
    name, grown = "g2", SIZE_MIB + 32
    vol = ok(lab, "s1", "volume", "create", name, "--size", f"{SIZE_MIB}MiB", "--replicas", "2")
    cluster["made"].append(name)
    nodes = [r["node"] for r in vol["replicas"]]
    ok(lab, "s1", "volume", "grant", name, "--host", cluster["host"])
    lab.sh("h1", f"nvme connect-all -t tcp -a {lab.addr(vol['primary'])} -s 8009 {CONNECT_OPTS}", timeout=300)
    _, head = _wait_paths(lab, vol["nqn"], 2)
    dev = f"/dev/{head}"
    lab.sh("h1", f"dd if=/dev/urandom of={dev} bs=1M count={SIZE_MIB} oflag=direct status=none", timeout=300)
    before = _md5_region(lab, "h1", dev, 0, SIZE_MIB)
    rc, out = nodeos(lab, "s2", "volume", "resize", name, "--size", "32MiB")
    assert rc == 2 and out["error"]["field"] == "size", out  # shrinking stays refused
    t0 = time.monotonic()
    after = ok(lab, "s2", "volume", "resize", name, "--size", f"{grown}MiB")
    assert after["size_bytes"] == grown * MIB
    _wait_host_size(lab, dev, grown * MIB)
    print(f"\nGROW {SIZE_MIB} -> {grown} MiB: host sees it after {time.monotonic() - t0:.1f} s")
    paths, _ = _wait_paths(lab, vol["nqn"], 2)
    assert sorted(p["ana"] for p in paths) == ["inaccessible", "optimized"]
    assert _md5_region(lab, "h1", dev, 0, SIZE_MIB) == before
    job = fio.run(
        lab,
        "h1",
        "tail",
        f"--filename={dev} --rw=randwrite --bs=4k --offset={SIZE_MIB}M --size=32M --direct=1 "
        "--ioengine=libaio --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1",
    )
    assert job["error"] == 0 and job["write"]["io_bytes"] > 0
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _lv_md5(lab, vm, vol, grown) for vm in nodes}
    assert len(set(sums.values())) == 1, sums
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
    ok(lab, "s1", "volume", "revoke", name, "--host", cluster["host"])
    ok(lab, "s1", "volume", "delete", name)
    cluster["made"].remove(name)
