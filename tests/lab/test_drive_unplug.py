"""A drive pulled out of a storage VM while a GPU node writes (issue 9: "a drive removed from a
VM (hot-unplug) fails its replicas over and they rebuild"). Three storage VMs, kernel data plane,
a 2-replica volume under fio random writes with verify through h1's multipath device; the NVMe
drive under the primary's pool is hot-unplugged (`nodeos-lab unplug`, PCIe hot-unplug through
QMP):

- the node reports the drive missing and its pool failed (nodeos/node/inventory.py);
- the primary's mirror keeps serving from the remote leg, and the leader hands the primary off
  to the in-sync replica (a planned move: ANA flips, zero verify errors);
- the old primary's slot is re-placed on the third VM at once (no re-placement grace: a pulled
  drive is not coming back) and copied in full under I/O; the volume is healthy again, both
  replicas hold the same bytes;
- when the VM boots again with its drive, its stale replica (forgotten while the drive was gone)
  is removed by the node's garbage rule after its grace period (`replica_orphan_removed`).

And SMART pre-failure: a drive that reports a critical warning (QEMU's `smart_critical_warning`,
`nodeos-lab smart`) is evacuated the same way while it still works.

The times (detection, failover, re-placement, rebuild) and the longest I/O are printed for
docs/benchmarks.md, never asserted: TCG timings are context. NODEOS_LAB_FULL=1 only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodeos_devtools.lab import Lab
from tests.lab.node_helpers import nodeos, ok, wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL
from tests.lab.test_failover import (
    SIZE_MIB,
    _events,
    _fio_result,
    _gap_s,
    _has_lv,
    _healthy,
    _md5_on,
    _placed_on,
    _show,
    _volume_under_fio,
    _wait,
)

pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")


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


def _node(lab: Lab, vm: str, name: str) -> dict[str, Any]:
    return next(n for n in ok(lab, vm, "node", "list") if n["name"] == name)


def test_a_drive_pulled_under_the_primary_fails_the_volume_over_and_its_replica_rebuilds_elsewhere(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    name = "hu2"
    vol, nodes, dev = _volume_under_fio(lab, cluster, name)
    old, new = vol["primary"], next(n for n in nodes if n != vol["primary"])
    third = next(vm for vm in STORAGE if vm not in nodes)
    (serial,) = lab.serials(old)
    t0 = time.monotonic()
    try:
        lab.unplug(old, serial)
        pulled = time.monotonic() - t0
        assert serial not in lab.sh(old, "cat /sys/class/nvme/*/serial 2>/dev/null || true").stdout
        seen = _wait(
            "the drive reported missing",
            lambda: serial in (h := _node(lab, new, old)["health"]) and "missing" in h and h,
            timeout=300,
            every=1,
        )
        detected = time.monotonic() - t0
        moved = _wait(
            "the primary moved", lambda: (v := _show(lab, new, name))["primary"] == new and v, 600, 2
        )
        failed_over = time.monotonic() - t0
        assert moved["epoch"] == vol["epoch"] + 1, moved
        placed = _wait("the replica re-placed", lambda: _placed_on(lab, new, name, [new, third]), 600, 2)
        replaced = time.monotonic() - t0
        assert placed["primary"] == new
        now = [new, third]
        back = _wait("the new replica in sync", lambda: _healthy(lab, new, name, now), timeout=1200, every=3)
        rebuilt = time.monotonic() - t0
        assert back["primary"] == new and back["epoch"] == moved["epoch"]
        print(
            f"\ndrive pulled under the primary ({seen}): unplug took {pulled:.1f} s; after the pull: "
            f"reported missing {detected:.1f} s, failed over {failed_over:.1f} s, "
            f"re-placed {replaced:.1f} s, in sync again {rebuilt:.1f} s "
            f"(copy {rebuilt - replaced:.0f} s for {SIZE_MIB} MiB)"
        )
        evs = [e for e in _events(lab, new) if e.get("volume") == vol["uuid"] or e["kind"] == "drive_failed"]
        print("events: " + "; ".join(f"{e['kind']}@{e.get('at') or 0:.1f}" for e in evs))
        job = _fio_result(lab, name)
        print(f"longest I/O {_gap_s(job):.1f} s")
        assert job["error"] == 0, job.get("error")  # zero verify errors, no I/O error
        assert job["write"]["io_bytes"] > 0
        kinds = [e["kind"] for e in evs]
        assert {"drive_failed", "handoff", "failover", "replica_replaced"} <= set(kinds), kinds
        fo = next(e for e in evs if e["kind"] == "failover" and e.get("epoch") == moved["epoch"])
        assert "missing" in fo["message"], fo
        lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
        sums = {vm: _md5_on(lab, vm, vol) for vm in now}
        assert len(set(sums.values())) == 1, sums
    finally:
        # The drive goes back in its bay: a power cycle boots the VM with every drive.
        lab.kill(old)
        lab.start(old)
        wait_daemon(lab, old)
    # The node forgot that replica while the drive was gone: its garbage rule removes the LV
    # after the grace period (nodeos/agent/orphans.py) and says so in the cluster's events.
    back = time.monotonic()
    _wait("the stale replica deleted", lambda: not _has_lv(lab, old, vol), timeout=600, every=5)
    print(f"stale replica's LV removed {time.monotonic() - back:.0f} s after nodeosd was back")

    def removal_events() -> list[dict[str, Any]]:
        return [e for e in _events(lab, new) if e["kind"] == "replica_orphan_removed"]

    def mine() -> list[dict[str, Any]]:
        return [e for e in removal_events() if vol["vol_id"] in e["message"]]

    # The node records the event after the removal (a Raft write of its own): wait for it.
    try:
        gone = _wait("the removal in the cluster's events", mine, timeout=120, every=5)
    except AssertionError as e:
        raise AssertionError(f"{e}; removals recorded: {removal_events()}") from None
    assert gone[-1].get("volume") == vol["uuid"], gone
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)


def test_a_drive_whose_smart_says_failing_is_evacuated_while_it_still_works(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    """SMART pre-failure: QEMU's NVMe reports a critical warning (reliability degraded) while the
    drive reads and writes on: the primary on it is handed off, its replica is re-placed on the
    third VM and copied in full, and the copy on the failing drive is deleted, before it dies."""
    name = "hs2"
    vol, nodes, dev = _volume_under_fio(lab, cluster, name)
    old, new = vol["primary"], next(n for n in nodes if n != vol["primary"])
    third = next(vm for vm in STORAGE if vm not in nodes)
    (serial,) = lab.serials(old)
    t0 = time.monotonic()
    lab.smart_warning(old, serial, 0x04)
    try:
        _wait(
            "the drive reported failing",
            lambda: "failing drives: " + serial in _node(lab, new, old)["health"],
            timeout=300,
            every=2,
        )
        detected = time.monotonic() - t0
        _wait("the primary moved", lambda: _show(lab, new, name)["primary"] == new, 600, 2)
        failed_over = time.monotonic() - t0
        _wait("the replica re-placed", lambda: _placed_on(lab, new, name, [new, third]), 600, 2)
        replaced = time.monotonic() - t0
        now = [new, third]
        back = _wait("the new replica in sync", lambda: _healthy(lab, new, name, now), timeout=1200, every=3)
        rebuilt = time.monotonic() - t0
        # Evacuated before it died: the drive still works and its copy is gone from it.
        _wait("the failing drive's copy deleted", lambda: not _has_lv(lab, old, vol), timeout=600, every=5)
        print(
            f"\nSMART failing under the primary: after the warning: reported {detected:.1f} s, "
            f"handed off {failed_over:.1f} s, re-placed {replaced:.1f} s, in sync again {rebuilt:.1f} s"
        )
        job = _fio_result(lab, name)
        print(f"longest I/O {_gap_s(job):.1f} s")
        assert job["error"] == 0, job.get("error")
        evs = [e for e in _events(lab, new) if e.get("volume") == vol["uuid"]]
        fo = next(e for e in evs if e["kind"] == "failover" and e.get("epoch") == back["epoch"])
        assert "failing" in fo["message"], fo
        lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
        sums = {vm: _md5_on(lab, vm, vol) for vm in now}
        assert len(set(sums.values())) == 1, sums
    finally:
        lab.smart_warning(old, serial, 0)
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
