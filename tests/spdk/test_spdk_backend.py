"""The SPDK backend against a REAL SPDK nvmf_tgt (marker `spdk`), with SPDK's own initiator
tools over TCP on loopback. File-backed AIO drives; see docs/spdk.md for how to run."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, MadeVolume, NewVolume
from nodeos.dataplane.spdk import client
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.errors import AlreadyExists, BadInput, NotFound, OperationFailed
from tests.spdk.conftest import SpdkTarget, free_port

pytestmark = pytest.mark.spdk

MIB = 1024 * 1024
H1 = "nqn.2014-08.org.nvmexpress:uuid:11111111-1111-4111-8111-111111111111"
H2 = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-4222-8222-222222222222"
NQN = "nqn.2014-08.io.nodeos:vol:5b0e6f0a-2c1d-4e8f-9a3b-7c6d5e4f3a21"
UUID = "5b0e6f0a-2c1d-4e8f-9a3b-7c6d5e4f3a21"


@pytest.fixture(scope="module")
def pool(spdk_target: SpdkTarget) -> str:
    dp = spdk_target.dp
    drives = []
    for i in range(2):
        f = spdk_target.workdir / f"drive{i}.img"
        with open(f, "wb") as fh:
            fh.truncate(512 * MIB)
        drives.append(dp.create_aio_drive_for_tests(f"AIOtest{i}", str(f)))
    info = dp.create_pool("p1", drives)
    assert set(info.devices) == set(drives)
    assert info.size_bytes > 900 * MIB
    return "p1"


@pytest.fixture(scope="module")
def port() -> str:
    return str(free_port())


def _spec(port: str, hosts: tuple[HostAccess, ...], vol: str = "v1", nqn: str = NQN) -> ExportSpec:
    return ExportSpec(
        nqn=nqn,
        serial="NODEOS0001",
        pool_id="p1",
        vol_id=vol,
        uuid=UUID,
        nguid=UUID.replace("-", ""),
        listeners=(Listener("tcp", "127.0.0.1", port),),
        hosts=hosts,
    )


def _trid(port: str, subnqn: str, host: str) -> str:
    return f"trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{subnqn} hostnqn:{host}"


def test_pool_is_idempotent_and_listed(spdk_target: SpdkTarget, pool: str) -> None:
    dp = spdk_target.dp
    again = dp.create_pool(pool, ["AIOtest0", "AIOtest1"])
    assert again.pool_id == pool
    assert [p.pool_id for p in dp.list_pools()] == [pool]
    d = dp.describe()
    assert "tcp" in d["transports"]
    # RDMA is either there or reported with its reason; never silently missing.
    assert ("rdma" in d["transports"]) != ("rdma" in d["transport_errors"])


def test_volume_export_visible_only_to_granted_host(spdk_target: SpdkTarget, pool: str, port: str) -> None:
    dp = spdk_target.dp
    made = dp.create_volume(pool, "v1", 61 * MIB + 1)  # 4 MiB clusters: 64 MiB
    # Not read back on the create path (issue 11), yet what SPDK shows.
    assert made.size_bytes == 64 * MIB and made in dp.list_volumes(pool)
    info = dp.apply_export(_spec(port, (HostAccess(H1),)))
    assert info.hosts == (H1,) and info.vol_id == "v1" and info.ana_state == "optimized"
    assert info == dp.export_info(NQN)
    (listed,) = [e for e in dp.list_exports() if e.nqn == NQN]
    assert (listed.vol_id, listed.listeners, listed.hosts) == ("v1", info.listeners, (H1,))
    disc = dp.discovery_svcid or "8009"
    r1 = spdk_target.run_tool(
        "spdk_nvme_identify",
        "--no-huge",
        "-s",
        "256",
        "-r",
        _trid(disc, "nqn.2014-08.org.nvmexpress.discovery", H1),
    )
    assert r1.returncode == 0, r1.stderr
    assert NQN in r1.stdout
    r2 = spdk_target.run_tool(
        "spdk_nvme_identify",
        "--no-huge",
        "-s",
        "256",
        "-r",
        _trid(disc, "nqn.2014-08.org.nvmexpress.discovery", H2),
    )
    assert NQN not in r2.stdout
    ok = spdk_target.run_tool("spdk_nvme_identify", "--no-huge", "-s", "256", "-r", _trid(port, NQN, H1))
    assert ok.returncode == 0 and UUID.replace("-", "")[:8] in ok.stdout.replace("-", "").lower()
    refused = spdk_target.run_tool("spdk_nvme_identify", "--no-huge", "-s", "256", "-r", _trid(port, NQN, H2))
    assert refused.returncode != 0 or NQN not in refused.stdout


def _record_rounds(dp: SpdkDataPlane, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The methods of each pipelined round trip (SpdkRpc.call_many) the data plane sends."""
    rounds: list[list[str]] = []
    call_many = dp.rpc.call_many
    monkeypatch.setattr(
        dp.rpc,
        "call_many",
        lambda reqs, window=64: rounds.append([m for m, _ in reqs]) or call_many(reqs, window),
    )
    return rounds


def test_a_volume_create_costs_the_rpcs_a_hand_made_one_does(
    spdk_target: SpdkTarget, pool: str, port: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: lvol, subsystem, namespace, host, listener, as by hand, in three round trips
    (the lvol with its subsystem, the namespace with its host, then the listener); nothing read
    (v1's export checked the transports and made the discovery listener on this connection)."""
    dp = spdk_target.dp
    sent: list[str] = []
    send = client._Connection.send
    monkeypatch.setattr(
        client._Connection,
        "send",
        lambda self, method, params=None: sent.append(method) or send(self, method, params),
    )
    rounds = _record_rounds(dp, monkeypatch)
    nqn = NQN[:-4] + "0002"
    (made,) = dp.create_volumes(
        [NewVolume(pool, "v2", 16 * MIB, _spec(port, (HostAccess(H2),), vol="v2", nqn=nqn))]
    )
    monkeypatch.undo()
    assert rounds == [
        ["bdev_lvol_create", "nvmf_create_subsystem"],
        ["nvmf_subsystem_add_ns", "nvmf_subsystem_add_host"],
        ["nvmf_subsystem_add_listener"],
    ]
    assert sent == [m for r in rounds for m in r]
    assert isinstance(made, MadeVolume) and made.volume == next(
        v for v in dp.list_volumes(pool) if v.vol_id == "v2"
    )
    assert made.export == dp.export_info(nqn)
    dp.remove_export(nqn)
    dp.delete_volume(pool, "v2")


def test_a_restarts_re_export_lists_once_and_sends_only_what_differs(
    spdk_target: SpdkTarget, pool: str, port: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12: nodeosd restarted over the exports its last run left (10,000 at scale). Three
    here: one unchanged, one granted a second host while the daemon was down, one whose subsystem
    is gone; and one whose lvol is gone: reported, the others re-exported all the same. Two listings
    for all, then per export only what differs."""
    old = spdk_target.dp
    specs = []
    for i in (3, 4, 5):
        old.create_volume(pool, f"v{i}", 16 * MIB)
        specs.append(_spec(port, (HostAccess(H1),), vol=f"v{i}", nqn=NQN[:-4] + f"000{i}"))
        old.apply_export(specs[-1])
    restarted = SpdkDataPlane(
        str(spdk_target.sock), keys_dir=old.keys_dir, discovery_svcid=old.discovery_svcid, transports=("tcp",)
    )
    restarted.reapply_exports(specs)  # checks the transports and discovery on its connection
    specs[1] = dataclasses.replace(specs[1], hosts=(HostAccess(H1), HostAccess(H2)))
    old.remove_export(specs[2].nqn)
    sent: list[str] = []
    send = client._Connection.send
    monkeypatch.setattr(
        client._Connection,
        "send",
        lambda self, method, params=None: sent.append(method) or send(self, method, params),
    )
    lost = _spec(port, (HostAccess(H1),), vol="v6", nqn=NQN[:-4] + "0006")  # its lvol is gone
    with pytest.raises(NotFound, match="v6"):
        restarted.reapply_exports([specs[0], lost, *specs[1:]])
    monkeypatch.undo()
    ana = "nvmf_subsystem_listener_set_ana_state"
    assert sent == [
        "bdev_get_bdevs",
        "nvmf_get_subsystems",
        "bdev_get_bdevs",  # v6, not listed: asked once by name before it is reported
        # in waves, the n-th change of every export together
        ana,  # v3: as it was, its ANA state only
        "nvmf_subsystem_add_host",  # v4: granted H2 meanwhile
        "nvmf_create_subsystem",  # v5: made again
        ana,  # v4
        "nvmf_subsystem_add_ns",  # v5
        "nvmf_subsystem_add_host",
        "nvmf_subsystem_add_listener",
    ]
    assert restarted.export_info(lost.nqn) is None  # reported (above), nothing half-made
    for spec in specs:
        info = restarted.export_info(spec.nqn)
        assert info is not None and (info.vol_id, info.ana_state) == (spec.vol_id, "optimized")
        assert set(info.hosts) == {h.host_nqn for h in spec.hosts}
    for spec in specs:
        old.remove_export(spec.nqn)
        old.delete_volume(pool, spec.vol_id)
    restarted.close()


def test_the_creates_of_one_pass_go_together_and_each_fails_alone(
    spdk_target: SpdkTarget, pool: str, port: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: the volume creates of one agent pass: round k of every volume pipelined together.
    One refused fails alone and leaves no half-made export: a name taken by a smaller volume
    (read, refused; the subsystem made beside it deleted again), a bad id (nothing sent), a
    namespace SPDK refuses (ANA group past the subsystem's 32 namespaces). A subsystem an earlier
    run left is completed. The others are made as one at a time would make them."""
    dp = spdk_target.dp
    dp.create_volume(pool, "v20", 16 * MIB)  # taken: asked again below at 64 MiB
    leftover = NQN[:-4] + "0023"
    dp.call(rq.create_subsystem(leftover, "NODEOS0023"))  # as a run killed after it left it

    def new(v: int, size: int = 16 * MIB, **spec: Any) -> NewVolume:
        export = dataclasses.replace(
            _spec(port, (HostAccess(H1),), vol=f"v{v}", nqn=NQN[:-4] + f"00{v}"), **spec
        )
        return NewVolume(pool, f"v{v}", size, export)

    rounds = _record_rounds(dp, monkeypatch)
    wanted = [
        new(21),
        new(20, 64 * MIB),
        NewVolume(pool, "bad/id", MIB),
        new(22),
        new(23),
        new(24, ana_group=100),
    ]
    out = dp.create_volumes(wanted)
    monkeypatch.undo()
    assert isinstance(out[1], AlreadyExists) and isinstance(out[2], BadInput)
    assert isinstance(out[5], OperationFailed)
    assert rounds == [
        ["bdev_lvol_create", "nvmf_create_subsystem"] * 5,  # v20's lvol and v23's subsystem refused
        ["nvmf_subsystem_add_ns", "nvmf_subsystem_add_host"] * 3,  # v21, v22, v24 (refused)
        ["nvmf_subsystem_add_listener"] * 2,
    ]
    for w in (wanted[1], wanted[5]):
        assert w.export is not None and dp.export_info(w.export.nqn) is None  # nothing half-made
    assert next(v for v in dp.list_volumes(pool) if v.vol_id == "v20").size_bytes == 16 * MIB
    for w, made in zip([wanted[0], *wanted[3:5]], [out[0], *out[3:5]], strict=True):
        assert isinstance(made, MadeVolume) and w.export is not None, made
        assert made.export == dp.export_info(w.export.nqn)
        assert (made.volume.vol_id, made.volume.size_bytes) == (w.vol_id, 16 * MIB)
        assert made.export is not None and (made.export.hosts, made.export.ana_state) == ((H1,), "optimized")
        dp.remove_export(w.export.nqn)
    for v in ("v20", "v21", "v22", "v23", "v24"):
        dp.delete_volume(pool, v)


def _dd_config(tmp: Path, port: str, host: str) -> Path:
    cfg = {
        "subsystems": [
            {
                "subsystem": "bdev",
                "config": [
                    {
                        "method": "bdev_nvme_attach_controller",
                        "params": {
                            "name": "R",
                            "trtype": "TCP",
                            "adrfam": "IPv4",
                            "traddr": "127.0.0.1",
                            "trsvcid": port,
                            "subnqn": NQN,
                            "hostnqn": host,
                        },
                    }
                ],
            }
        ]
    }
    p = tmp / f"dd-{host[-4:]}.json"
    p.write_text(json.dumps(cfg))
    return p


def test_data_round_trip_with_spdk_dd(spdk_target: SpdkTarget, pool: str, port: str, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(4 * MIB))
    cfg = _dd_config(tmp_path, port, H1)
    # spdk_dd needs more than 256 MiB, and the target holds core 0's lock
    common = ["--no-huge", "-s", "512", "--disable-cpumask-locks", "--json", str(cfg), "--bs", "65536"]
    w = spdk_target.run_tool("spdk_dd", "--if", str(src), "--ob", "Rn1", *common)
    assert w.returncode == 0, w.stderr
    back = tmp_path / "back.bin"
    r = spdk_target.run_tool("spdk_dd", "--ib", "Rn1", "--of", str(back), "--count", "64", *common)
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()


def test_perf_runs_against_the_export(spdk_target: SpdkTarget, pool: str, port: str) -> None:
    r = spdk_target.run_tool(
        "spdk_nvme_perf",
        "--no-huge",
        "-s",
        "256",
        "-q",
        "8",
        "-o",
        "4096",
        "-w",
        "randread",
        "-t",
        "2",
        "-r",
        _trid(port, NQN, H1),
    )
    assert r.returncode == 0, r.stderr
    assert re.search(r"Total\s*:\s*[\d.]+", r.stdout)


def test_resize_snapshot_clone_qos(spdk_target: SpdkTarget, pool: str) -> None:
    dp = spdk_target.dp
    grown = dp.resize_volume(pool, "v1", 128 * MIB)
    assert grown.size_bytes == 128 * MIB
    with pytest.raises(BadInput) as e:
        dp.resize_volume(pool, "v1", 64 * MIB)
    assert e.value.field == "size_bytes"
    snap = dp.snapshot_volume(pool, "v1", "s1")
    assert snap.kind == "snapshot"
    assert dp.snapshot_volume(pool, "v1", "s1") == snap
    clone = dp.clone_snapshot(pool, "s1", "c1")
    assert clone.origin == "s1" and clone.size_bytes == 128 * MIB
    with pytest.raises(NotFound) as nf:  # SPDK's -19, asked at once (no look first)
        dp.snapshot_volume(pool, "nosuch", "s2")
    assert nf.value.field == "vol_id"
    with pytest.raises(AlreadyExists) as ae:  # the name is taken by a clone, not a snapshot
        dp.snapshot_volume(pool, "v1", "c1")
    assert ae.value.field == "snap_id"
    vols = {v.vol_id for v in dp.list_volumes(pool)}
    assert {"v1", "s1", "c1"} <= vols


def test_qos_is_set_on_the_bdev(spdk_target: SpdkTarget, pool: str, port: str) -> None:
    dp = spdk_target.dp
    dp.create_volume(pool, "q1", 16 * MIB)
    nqn = NQN[:-4] + "0001"
    spec = _spec(port, (), vol="q1", nqn=nqn)
    dp.apply_export(ExportSpec(**{**spec.__dict__, "qos_iops": 2000, "qos_mbps": 10}))
    b = dp.call(("bdev_get_bdevs", {"name": "nodeos_p1/q1"}))[0]
    assert b["assigned_rate_limits"]["rw_ios_per_sec"] == 2000
    assert b["assigned_rate_limits"]["rw_mbytes_per_sec"] == 10
    dp.remove_export(nqn)
    dp.remove_export(nqn)
    assert dp.export_info(nqn) is None
    dp.delete_volume(pool, "q1")


def test_a_volume_made_with_qos_has_it_on_its_bdev(spdk_target: SpdkTarget, pool: str, port: str) -> None:
    """`volume create --qos-iops/--qos-mbps`: the limit goes in the round of the namespace and
    hosts (sent together with them), and holds."""
    dp = spdk_target.dp
    nqn = NQN[:-4] + "0031"
    spec = dataclasses.replace(_spec(port, (HostAccess(H1),), vol="q2", nqn=nqn), qos_iops=3000, qos_mbps=20)
    (made,) = dp.create_volumes([NewVolume(pool, "q2", 16 * MIB, spec)])
    assert isinstance(made, MadeVolume) and made.export == dp.export_info(nqn), made
    b = dp.call(("bdev_get_bdevs", {"name": f"nodeos_{pool}/q2"}))[0]
    assert (b["assigned_rate_limits"]["rw_ios_per_sec"], b["assigned_rate_limits"]["rw_mbytes_per_sec"]) == (
        3000,
        20,
    )
    dp.remove_export(nqn)
    dp.delete_volume(pool, "q2")


def test_revoke_and_delete_refusals(spdk_target: SpdkTarget, pool: str, port: str) -> None:
    dp = spdk_target.dp
    with pytest.raises(OperationFailed):
        dp.delete_volume(pool, "v1")  # exported
    info = dp.apply_export(_spec(port, ()))
    assert info.hosts == ()
    dp.remove_export(NQN)
    with pytest.raises(NotFound):
        dp.set_ana_state(NQN, 1, "optimized")


def test_revoke_hosts_alone_while_the_lvol_is_gone(spdk_target: SpdkTarget, pool: str, port: str) -> None:
    """The host side of an export applied by itself (a pulled drive: the grant step cannot find
    the lvol): the revoked host leaves the subsystem, the kept one stays, nothing else changes."""
    dp = spdk_target.dp
    dp.create_volume(pool, "v-revoke", 8 * MIB)
    nqn = NQN.replace(UUID[-4:], "beef")
    other = UUID[:-4] + "beef"  # its own namespace ids beside v1's export
    spec = _spec(port, (HostAccess(H1), HostAccess(H2)), vol="v-revoke", nqn=nqn)
    before = dp.apply_export(dataclasses.replace(spec, uuid=other, nguid=other.replace("-", "")))
    assert set(before.hosts) == {H1, H2}
    assert dp.revoke_hosts(nqn, [H1]) == [H2]
    after = dp.export_info(nqn)
    assert after is not None and after.hosts == (H1,) and after.listeners == before.listeners
    assert dp.revoke_hosts(nqn, [H1]) == []
    with pytest.raises(NotFound):
        dp.revoke_hosts(nqn + "x", [])
    dp.remove_export(nqn)
    dp.delete_volume(pool, "v-revoke")
