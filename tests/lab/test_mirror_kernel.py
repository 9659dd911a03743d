"""Mirror over the fabric and the multi-node front end, kernel data plane (issue 8), for real:
s1 is the primary (md raid1 over its LV and the replicas' namespaces on s2, s3, attached
with the kernel NVMe/TCP initiator), all three export the volume under one NQN (s1 optimized,
s2 and s3 inaccessible through a linear view of their replica), every node's discovery port
refers to the others; h1 runs stock nvme-cli with native multipath.

nodeosd is stopped on the storage VMs: these tests drive nodeos.dataplane directly, and the
daemon would reconcile the `vol:` exports it does not know away.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodeos.dataplane.mirror_names import replica_nqn, volume_nqn
from nodeos_devtools.lab import Lab, fio
from tests.lab import shared_labs
from tests.lab.dataplane_helpers import device_of, discover, wait_for
from tests.lab.mirror_helpers import (
    HOST_OPTS,
    MIB,
    POOL,
    VOL,
    VOL_ID,
    VOL_SIZE,
    dp,
    front_end_code,
    host_paths,
    leg_md5,
    ok,
    remote_code,
    replica_export,
)

# The product path of the mirror (agents, map, crash recovery) is tested on the shared cluster3
# lab (test_replicated_volumes.py, test_replicated_crash.py); these primitives boot a lab of
# their own, which CI's budget cannot hold.
pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(not shared_labs.LAB_FULL, reason=shared_labs.NOT_FULL),
]
LAB = dict(storage=3, drives=1, hosts=1, drive_size_mib=256)
STORAGE = ("s1", "s2", "s3")
NQN = volume_nqn(VOL)


def assemble_code(lab: Lab, create: bool) -> str:
    return f"""
a = d.attach_remote({remote_code(lab, "s2", "s1")})
b = d.attach_remote({remote_code(lab, "s3", "s1")})
info = d.assemble_mirror(MirrorSpec(mirror_id=mn.mirror_id_for({VOL!r}),
    members=("/dev/nodeos_{POOL}/v_{VOL_ID}", a, b), size_bytes={VOL_SIZE},
    data_offset_bytes=mn.MIRROR_DATA_OFFSET, create={create!r}))"""


def mirror_status(lab: Lab) -> dict[str, Any]:
    return ok(dp(lab, "s1", f"out(d.mirror_status(mn.mirror_id_for({VOL!r})))"))


def md_attrs(lab: Lab, *names: str) -> list[str]:
    """/sys/block/mdX/md attributes of the mirror on s1."""
    md = f"/sys/block/$(basename $(readlink -f {mirror_status(lab)['device']}))/md"
    return lab.sh("s1", " && ".join(f"cat {md}/{n}" for n in names)).stdout.split()


@pytest.fixture(scope="module")
def nodes(lab: Lab) -> Iterator[tuple[str, ...]]:
    for vm in STORAGE:
        lab.sh(vm, "systemctl stop nodeosd.service 2>/dev/null || true", timeout=900)
        ok(dp(lab, vm, f"out(d.create_pool({POOL!r}, ['/dev/nvme0n1']))"))
    yield STORAGE


@pytest.fixture(scope="module")
def mirror(lab: Lab, nodes: tuple[str, ...]) -> dict[str, Any]:
    for vm in ("s2", "s3"):
        replica_export(lab, vm, "s1")
    return ok(
        dp(
            lab,
            "s1",
            f"""
d.create_volume({POOL!r}, {VOL_ID!r}, mn.member_size_bytes({VOL_SIZE}))
{assemble_code(lab, create=True)}
out([a, b, info])""",
        )
    )


@pytest.fixture(scope="module")
def exported(lab: Lab, mirror: dict[str, Any]) -> str:
    ok(
        dp(
            lab,
            "s1",
            f"m = d.mirror_status(mn.mirror_id_for({VOL!r}))\n"
            f"{front_end_code(lab, 's1', 0, 'm.device', True)}\nout(fe)",
        )
    )
    for i, vm in ((1, "s2"), (2, "s3")):
        code = f"""
view = d.ensure_view(mn.view_id_for(mn.mirror_id_for({VOL!r})), "/dev/nodeos_{POOL}/v_{VOL_ID}",
    mn.MIRROR_DATA_OFFSET, {VOL_SIZE})
{front_end_code(lab, vm, i, "view", False)}
out(fe)"""
        ok(dp(lab, vm, code))
    return NQN


@pytest.fixture(scope="module")
def host_dev(lab: Lab, exported: str) -> str:
    # Against ONE node: the referrals lead nvme-cli to the other two.
    r = lab.exec(
        "h1",
        ["nvme", "connect-all", "-t", "tcp", "-a", lab.addr("s1"), "-s", "8009", *HOST_OPTS],
        timeout=300,
    )
    assert r.rc == 0, r.stdout + r.stderr
    wait_for("three live paths", lambda: [p["state"] for p in host_paths(lab, exported)] == ["live"] * 3, 120)
    return device_of(lab, "h1", exported)


def test_replica_is_exported_to_the_primary_only(lab: Lab, mirror: dict[str, Any]) -> None:
    rep = replica_nqn(VOL, "s2")
    assert rep not in discover(lab, "h1", lab.addr("s2"), "4420")
    r = lab.exec(
        "h1", ["nvme", "connect", "-t", "tcp", "-a", lab.addr("s2"), "-s", "4420", "-n", rep], timeout=120
    )
    assert r.rc != 0, r.stdout
    assert rep not in lab.sh("h1", "cat /sys/class/nvme-subsystem/*/subsysnqn 2>/dev/null || true").stdout


def test_mirror_has_three_in_sync_legs_of_the_volume_size(lab: Lab, mirror: dict[str, Any]) -> None:
    dev2, dev3, info = mirror
    assert info["size_bytes"] == VOL_SIZE and info["data_offset_bytes"] == 8 * MIB
    assert not info["degraded"]
    legs = [(m["slot"], m["device"], m["state"]) for m in info["members"]]
    assert legs == [
        (0, f"/dev/mapper/nodeos_{POOL}-v_{VOL_ID}", "in_sync"),
        (1, dev2, "in_sync"),
        (2, dev3, "in_sync"),
    ]
    # md keeps writes to one block in order on every leg (md_serial.py: no ghost write).
    assert md_attrs(lab, "serialize_policy") == ["1"]
    # Idempotent: attaching and assembling again changes nothing.
    again = ok(
        dp(
            lab,
            "s1",
            f"{assemble_code(lab, create=True)}\nout([a, b, info, d.list_remotes(), d.list_mirrors()])",
        )
    )
    assert again[:3] == mirror
    assert sorted((r["nqn"], r["state"], r["device"]) for r in again[3]) == [
        (replica_nqn(VOL, "s2"), "live", dev2),
        (replica_nqn(VOL, "s3"), "live", dev3),
    ]
    assert [m["mirror_id"] for m in again[4]] == [info["mirror_id"]]


def test_host_sees_one_device_with_one_path_per_node(lab: Lab, host_dev: str) -> None:
    paths = host_paths(lab, NQN)
    addrs = sorted(p["address"].split(",")[0].removeprefix("traddr=") for p in paths)
    assert addrs == sorted(lab.addr(vm) for vm in STORAGE)
    by_addr = {p["address"].split(",")[0].removeprefix("traddr="): p["ana"] for p in paths}
    assert by_addr == {
        lab.addr("s1"): "optimized",
        lab.addr("s2"): "inaccessible",
        lab.addr("s3"): "inaccessible",
    }
    heads = lab.sh("h1", "lsblk -dn -o NAME,SIZE -b | grep '^nvme' || true").stdout.split("\n")
    assert [h.split() for h in heads if h] == [[host_dev.removeprefix("/dev/"), str(VOL_SIZE)]]


def test_fio_verify_through_the_mirror_and_every_leg_is_identical(lab: Lab, host_dev: str) -> None:
    job = fio.run(
        lab,
        "h1",
        "mirror",
        f"--filename={host_dev} --rw=randwrite --bs=16k --size=32M --direct=1 --ioengine=libaio "
        "--iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0",
    )
    assert job["error"] == 0 and job["write"]["io_bytes"] == job["read"]["io_bytes"] == 32 * MIB
    # Direct writes are acknowledged by md only once every in-sync leg has them.
    seen = lab.sh(
        "h1", f"dd if={host_dev} bs=1M iflag=direct status=none | md5sum | cut -d' ' -f1"
    ).stdout.strip()
    assert {vm: leg_md5(lab, vm) for vm in STORAGE} == {vm: seen for vm in STORAGE}


def test_a_returning_replica_catches_up_and_matches(lab: Lab, host_dev: str) -> None:
    lab.cut("s3")
    try:
        lab.sh(
            "h1",
            f"head -c 4M /dev/urandom | dd of={host_dev} bs=1M seek=40 oflag=direct conv=fsync status=none",
        )
        wait_for("md to fail the cut-off leg", lambda: mirror_status(lab)["degraded"], 120, 2)
    finally:
        lab.heal("s3")
    # What an agent does: attach (reconnects or already back) and assemble with the same members.
    deadline = time.monotonic() + 180
    while True:
        got = dp(lab, "s1", f"{assemble_code(lab, create=False)}\nout(info)")
        if "error" not in got or time.monotonic() > deadline:
            break
        time.sleep(2)  # the replica's controller is still reconnecting (reconnect_delay)
    ok(got)
    wait_for(
        "the returning leg to be in sync",
        lambda: (s := mirror_status(lab))["sync_action"] == "idle" and not s["degraded"],
        300,
        2,
    )
    assert [m["state"] for m in mirror_status(lab)["members"]] == ["in_sync"] * 3
    # The leg came back with the writes held and serialization off; both are back as they were.
    assert md_attrs(lab, "serialize_policy", "suspend_lo", "suspend_hi") == ["1", "0", "0"]
    seen = lab.sh(
        "h1", f"dd if={host_dev} bs=1M iflag=direct status=none | md5sum | cut -d' ' -f1"
    ).stdout.strip()
    assert {vm: leg_md5(lab, vm) for vm in STORAGE} == {vm: seen for vm in STORAGE}
