"""A replicated volume on the SPDK data plane against two REAL nvmf_tgt processes (marker `spdk`).

The replica node (interrupt mode) exports its lvol with the replica's fixed UUID/NGUID to the
primary's host NQN only; the primary (polling: bdev_nvme over TCP needs it) attaches it, builds
raid1 over its local lvol and the remote, and exports the front end. Bytes written through the
front end with spdk_dd are read back from each leg (a snapshot of it, cloned and exported). Then
the replica is killed (the leg shows lost, writes go on), restarted, re-attached and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, MirrorInfo, MirrorSpec, RemoteSpec
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.errors import BadInput, EnvironmentProblem, OperationFailed
from tests.spdk.conftest import SpdkTarget, free_port, need_root, spdk_dir, start_target, stop_target

pytestmark = pytest.mark.spdk

MIB = 1024 * 1024
SIZE = 64 * MIB
VOL = "0b7e4c1a-6d2f-4a3b-8c9d-1e2f3a4b5c6d"
PRIMARY_HOST = "nqn.2014-08.io.nodeos:node:c1:1"
HOST_ID = "6f1f9a52-1d1e-4f43-9a55-0e2a3b4c5d6e"
OTHER_HOST = "nqn.2014-08.io.nodeos:node:c1:3"
H1 = "nqn.2014-08.org.nvmexpress:uuid:11111111-1111-4111-8111-111111111111"
MID = names.mirror_id_for(VOL)
LOCAL = "nodeos_p/v1"
WAIT_S = 60.0


@dataclass
class Lab:
    primary: SpdkTarget
    replica: SpdkTarget
    bin_dir: Path
    work: Path
    replica_port: str
    front_port: str
    remote_bdev: str = ""

    def remote(self, host_nqn: str = PRIMARY_HOST) -> RemoteSpec:
        return RemoteSpec(
            nqn=names.replica_nqn(VOL, "2"),
            listener=Listener("tcp", "127.0.0.1", self.replica_port),
            host_nqn=host_nqn,
            host_id=HOST_ID,
            nguid=names.replica_ids(VOL, "2")[1],
            reconnect_delay=1,  # never given up, I/O never failed early (the defaults)
        )

    def spec(self, create: bool = False) -> MirrorSpec:
        return MirrorSpec(MID, (LOCAL, self.remote_bdev), SIZE, data_offset_bytes=0, create=create)


def _pool(t: SpdkTarget, fresh: bool = True) -> None:
    f = t.workdir / "drive.img"
    if fresh:
        with open(f, "wb") as fh:
            fh.truncate(256 * MIB)
    t.dp.create_aio_drive_for_tests("AIOm", str(f))
    if fresh:
        t.dp.create_pool("p", ["AIOm"])


def _export_replica(lab: Lab) -> None:
    ruuid, rnguid = names.replica_ids(VOL, "2")
    lab.replica.dp.apply_export(
        ExportSpec(
            nqn=names.replica_nqn(VOL, "2"),
            serial=rnguid[:20],
            pool_id="p",
            vol_id="v1",
            uuid=ruuid,
            nguid=rnguid,
            listeners=(Listener("tcp", "127.0.0.1", lab.replica_port),),
            hosts=(HostAccess(PRIMARY_HOST),),
        )
    )


def _start_replica(lab: Lab, fresh: bool) -> SpdkTarget:
    # A pure replica node runs in interrupt mode (no core spent polling).
    t = start_target(lab.bin_dir, lab.work / "replica", ("--interrupt-mode",), nice=19, discovery_svcid=None)
    _pool(t, fresh)
    return t


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    bin_dir = spdk_dir()
    need_root()
    work = tmp_path_factory.mktemp("spdk-mirror")
    primary = start_target(bin_dir, work / "primary", nice=19, discovery_svcid=None)
    lab = Lab(primary, primary, bin_dir, work, str(free_port()), str(free_port()))
    try:
        lab.replica = _start_replica(lab, fresh=True)
        _pool(primary)
        primary.dp.create_volume("p", "v1", SIZE)
        lab.replica.dp.create_volume("p", "v1", SIZE)
        _export_replica(lab)
        yield lab
    finally:
        stop_target(lab.replica, signal.SIGKILL)
        stop_target(primary, signal.SIGKILL)


def _dd_cmd(lab: Lab, nqn: str, port: str, *args: str) -> list[str]:
    cfg = lab.work / f"dd-{port}-{nqn[-6:]}.json"
    attach = {
        "method": "bdev_nvme_attach_controller",
        "params": {
            "name": "F",
            "trtype": "TCP",
            "adrfam": "IPv4",
            "traddr": "127.0.0.1",
            "trsvcid": port,
            "subnqn": nqn,
            "hostnqn": H1,
        },
    }
    cfg.write_text(json.dumps({"subsystems": [{"subsystem": "bdev", "config": [attach]}]}))
    dd = str(lab.primary.tool("spdk_dd"))
    return [
        dd,
        "--no-huge",
        "-s",
        "512",
        "--disable-cpumask-locks",
        "--json",
        str(cfg),
        "--bs",
        "1048576",
        *args,
    ]


def _dd(lab: Lab, nqn: str, port: str, *args: str) -> None:
    for _ in range(3):  # a connect to a niced, polling target on 2 busy shared cores can time out
        r = subprocess.run(
            _dd_cmd(lab, nqn, port, *args), capture_output=True, text=True, timeout=120, check=False
        )
        if r.returncode == 0 or "Failed to initialize SSD" not in r.stdout + r.stderr:
            break
        time.sleep(2)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def _write_front(lab: Lab, data: bytes, wait: bool = True) -> subprocess.Popen[bytes] | None:
    src = lab.work / "src.bin"
    src.write_bytes(data)
    args = (names.volume_nqn(VOL), lab.front_port, "--if", str(src), "--ob", "Fn1")
    if not wait:
        return subprocess.Popen(_dd_cmd(lab, *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _dd(lab, *args)
    return None


def _leg_bytes(lab: Lab, t: SpdkTarget, tag: str, count_mib: int) -> bytes:
    """What one leg holds: a snapshot of its lvol, cloned and exported to H1, read with spdk_dd."""
    t.dp.snapshot_volume("p", "v1", f"s{tag}")
    t.dp.clone_snapshot("p", f"s{tag}", f"c{tag}")
    nqn = names.VOLUME_NQN_PREFIX + f"leg-{tag}"
    port = str(free_port())
    t.dp.apply_export(
        ExportSpec(
            nqn=nqn,
            serial=f"LEG{tag}",
            pool_id="p",
            vol_id=f"c{tag}",
            uuid=str(uuid.uuid4()),
            nguid=os.urandom(16).hex(),
            listeners=(Listener("tcp", "127.0.0.1", port),),
            hosts=(HostAccess(H1),),
        )
    )
    out = lab.work / f"leg-{tag}.bin"
    _dd(lab, nqn, port, "--ib", "Fn1", "--of", str(out), "--count", str(count_mib))
    t.dp.remove_export(nqn)
    return out.read_bytes()


def _wait(dp: SpdkDataPlane, what: str, ok: Callable[[MirrorInfo], bool]) -> MirrorInfo:
    deadline = time.monotonic() + WAIT_S
    info = None
    while time.monotonic() < deadline:
        info = dp.mirror_status(MID)
        if info is not None and ok(info):
            return info
        time.sleep(0.5)
    raise AssertionError(f"mirror never {what}: {info}")


def test_replica_is_exported_to_the_primary_only(lab: Lab) -> None:
    with pytest.raises(OperationFailed) as e:
        lab.primary.dp.attach_remote(lab.remote(OTHER_HOST))
    assert e.value.field == "nqn"
    assert lab.primary.dp.list_remotes() == []
    lab.remote_bdev = lab.primary.dp.attach_remote(lab.remote())
    again = lab.primary.dp.attach_remote(lab.remote())
    assert again == lab.remote_bdev
    (r,) = lab.primary.dp.list_remotes()
    assert (r.nqn, r.device, r.nguid, r.host_nqn) == (
        names.replica_nqn(VOL, "2"),
        lab.remote_bdev,
        names.replica_ids(VOL, "2")[1],
        PRIMARY_HOST,
    )


def test_interrupt_mode_target_cannot_host_a_mirror(lab: Lab) -> None:
    with pytest.raises(EnvironmentProblem) as e:
        lab.replica.dp.attach_remote(
            RemoteSpec(
                nqn=names.replica_nqn(VOL, "9"),
                listener=Listener("tcp", "127.0.0.1", lab.replica_port),
                host_nqn=PRIMARY_HOST,
                host_id=HOST_ID,
                nguid=names.replica_ids(VOL, "9")[1],
            )
        )
    assert e.value.field == "nqn"


def test_mirror_created_exported_and_written_on_both_legs(lab: Lab) -> None:
    dp = lab.primary.dp
    with pytest.raises(BadInput) as e:
        dp.assemble_mirror(MirrorSpec(MID, (LOCAL, lab.remote_bdev), SIZE, names.MIRROR_DATA_OFFSET))
    assert e.value.field == "data_offset_bytes"
    info = dp.assemble_mirror(lab.spec(create=True))
    assert [(m.device, m.state) for m in info.members] == [(LOCAL, "in_sync"), (lab.remote_bdev, "in_sync")]
    assert info.size_bytes == SIZE and not info.degraded and info.data_offset_bytes == 0
    assert dp.assemble_mirror(lab.spec(create=True)) == info  # idempotent
    assert [m.mirror_id for m in dp.list_mirrors()] == [MID]
    with pytest.raises(OperationFailed):
        dp.detach_remote(names.replica_nqn(VOL, "2"))  # a member of the mirror
    spec = ExportSpec(
        nqn=names.volume_nqn(VOL),
        serial="NODEOSMIRROR1",
        pool_id="p",
        vol_id="v1",
        uuid=VOL,
        nguid=VOL.replace("-", ""),
        listeners=(Listener("tcp", "127.0.0.1", lab.front_port),),
        hosts=(HostAccess(H1),),
        device=MID,
    )
    front = dp.apply_export(spec)
    assert front.device == MID and front.ana_state == "optimized"
    with pytest.raises(OperationFailed):
        dp.stop_mirror(MID)  # exported
    # The write freeze (snapshots of replicated volumes) holds the front end: a host's write
    # waits (its I/O answered ANA inaccessible, retried), a re-export keeps the freeze, and
    # after the thaw the write completes on both legs.
    assert not dp.mirror_writes_frozen(MID)
    dp.prepare_mirror_freeze(MID)  # the reads and the freeze group's listeners: nothing held
    assert not dp.mirror_writes_frozen(MID)
    dp.freeze_mirror_writes(MID)
    dp.freeze_mirror_writes(MID)  # idempotent
    assert dp.mirror_writes_frozen(MID)
    assert dp.apply_export(spec).ana_state == "optimized" and dp.mirror_writes_frozen(MID)
    data = os.urandom(8 * MIB)
    writer = _write_front(lab, data, wait=False)
    assert writer is not None
    deadline = time.monotonic() + WAIT_S
    while H1 not in (dp.export_info(spec.nqn) or front).connected_hosts:
        assert writer.poll() is None and time.monotonic() < deadline, "the writer never connected"
        time.sleep(0.2)
    time.sleep(3)
    assert writer.poll() is None, "a write went through a frozen front end"
    assert _leg_bytes(lab, lab.replica, "r0", 8) == bytes(8 * MIB)
    dp.thaw_mirror_writes(MID)
    dp.thaw_mirror_writes(MID)  # idempotent
    assert not dp.mirror_writes_frozen(MID)
    assert writer.wait(timeout=120) == 0
    assert _leg_bytes(lab, lab.primary, "p1", 8) == data
    assert _leg_bytes(lab, lab.replica, "r1", 8) == data
    # A thaw right after its freeze moves the namespace home without reading it first.
    dp.prepare_mirror_freeze(MID)
    dp.freeze_mirror_writes(MID)
    assert dp.mirror_writes_frozen(MID)
    dp.thaw_mirror_writes(MID)
    assert not dp.mirror_writes_frozen(MID)
    assert dp.export_info(spec.nqn).ana_state == "optimized"  # type: ignore[union-attr]


def test_lost_leg_blocks_writes_until_dropped_and_rejoin_rebuilds(lab: Lab) -> None:
    dp = lab.primary.dp
    nqn = names.replica_nqn(VOL, "2")
    stop_target(lab.replica, signal.SIGKILL)
    degraded_data = os.urandom(8 * MIB)
    writer = _write_front(lab, degraded_data, wait=False)
    assert writer is not None
    deadline = time.monotonic() + WAIT_S
    while [r.state for r in dp.list_remotes()] == ["live"]:
        assert time.monotonic() < deadline, "the replica's controller stayed live"
        time.sleep(0.2)
    time.sleep(2)
    assert writer.poll() is None  # the write waits for the lost leg: nothing is acknowledged on one leg alone
    dp.drop_mirror_leg(MID, nqn)  # the map no longer counts the replica in sync
    assert writer.wait(timeout=60) == 0  # held writes complete on the local leg
    info = dp.mirror_status(MID)
    assert info is not None and info.degraded and info.members[0].state == "in_sync"
    assert [m.state for m in info.members if m.device is None] == ["missing"]
    assert dp.list_remotes() == []
    dp.drop_mirror_leg(MID, nqn)  # idempotent
    # the replica node comes back with its lvol (the subsystem is made again by its agent)
    lab.replica = _start_replica(lab, fresh=False)
    _export_replica(lab)
    assert lab.primary.dp.attach_remote(lab.remote()) == lab.remote_bdev
    info = dp.assemble_mirror(lab.spec())
    assert {m.device for m in info.members} == {LOCAL, lab.remote_bdev}
    info = _wait(dp, "rebuilt", lambda i: not i.degraded)
    assert info.sync_action == "idle"
    assert _leg_bytes(lab, lab.replica, "r2", 8) == degraded_data  # a full copy, not just the new writes
    assert (
        hashlib.sha256(_leg_bytes(lab, lab.primary, "p2", 8)).digest()
        == hashlib.sha256(degraded_data).digest()
    )


def test_restart_of_the_mirror_starts_from_the_first_member(lab: Lab) -> None:
    dp = lab.primary.dp
    dp.remove_export(names.volume_nqn(VOL))
    dp.stop_mirror(MID)
    assert dp.mirror_status(MID) is None
    dp.set_rebuild_limit(10 * 1024)
    info = dp.assemble_mirror(lab.spec())  # not a create: the remote leg is copied again from LOCAL
    states = {m.device: m.state for m in info.members}
    assert states[LOCAL] == "in_sync" and states[lab.remote_bdev] in ("rebuilding", "in_sync")
    dp.set_rebuild_limit(None)
    _wait(dp, "rebuilt", lambda i: not i.degraded)
    dp.stop_mirror(MID)
    dp.detach_remote(names.replica_nqn(VOL, "2"))
    assert dp.list_remotes() == []
