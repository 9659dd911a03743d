"""The SPDK mirror's pure parts: request shapes (checked against the `spdk` package's CLI names),
spec checks, timeouts in bdev_nvme's terms, and reading raid/nvme answers into MirrorInfo and
RemoteInfo. The behaviour against a real SPDK is tests/spdk/test_spdk_mirror.py."""

from __future__ import annotations

import dataclasses

import pytest

from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import Listener, MirrorSpec, RemoteSpec
from nodeos.dataplane.spdk import mirror_plan as sm
from nodeos.dataplane.spdk import requests as rq
from nodeos.errors import BadInput
from tests.unit.dataplane.spdk_schema import cli_params

VOL = "5b0e6f0a-2c1d-4e8f-9a3b-7c6d5e4f3a21"
MID = names.mirror_id_for(VOL)
MIB = 1024 * 1024
REMOTE = RemoteSpec(
    nqn=names.replica_nqn(VOL, "2"),
    listener=Listener("tcp", "10.0.0.2", "4420"),
    host_nqn="nqn.2014-08.io.nodeos:node:c1:1",
    host_id="6f1f9a52-1d1e-4f43-9a55-0e2a3b4c5d6e",
    nguid=names.replica_ids(VOL, "2")[1],
)
SPEC = MirrorSpec(
    mirror_id=MID, members=("nodeos_p1/v1", "nodeos_rep_xn1"), size_bytes=64 * MIB, data_offset_bytes=0
)


@pytest.mark.parametrize(
    "req",
    [
        sm.nvme_attach(REMOTE),
        rq.nvme_detach("c"),
        rq.nvme_get_controllers("c"),
        rq.raid1_create(MID, ["a", "b"]),
        rq.raid_delete(MID),
        rq.raid_get_bdevs("online"),
        rq.raid_add_base(MID, "b"),
        rq.raid_remove_base("b"),
        rq.raid_set_options(50),
        rq.null_create("h", 16384, 4096),
        rq.null_delete("h"),
    ],
    ids=lambda r: r[0],
)
def test_requests_use_the_spdk_packages_parameter_names(req: tuple[str, dict[str, object]]) -> None:
    method, params = req
    assert set(params) <= cli_params()[method], (method, set(params) - cli_params()[method])


def test_attach_names_the_replica_and_this_nodes_host_and_fails_io_early() -> None:
    _, p = sm.nvme_attach(REMOTE)
    assert p["subnqn"] == REMOTE.nqn and p["hostnqn"] == REMOTE.host_nqn
    assert (p["trtype"], p["traddr"], p["trsvcid"]) == ("TCP", "10.0.0.2", "4420")
    assert p["name"] == sm.ctrl_name(REMOTE.nqn) and p["name"].startswith(sm.CTRL_PREFIX)
    # never give up, never fail I/O early: bdev_nvme's -1 and 0
    assert (p["ctrlr_loss_timeout_sec"], p["reconnect_delay_sec"], p["fast_io_fail_timeout_sec"]) == (
        -1,
        2,
        0,
    )
    # the kernel's "fail I/O at once" (0) is bdev_nvme's earliest: the reconnect delay
    _, p = sm.nvme_attach(dataclasses.replace(REMOTE, ctrl_loss_tmo=60, fast_io_fail_tmo=0))
    assert (p["ctrlr_loss_timeout_sec"], p["reconnect_delay_sec"], p["fast_io_fail_timeout_sec"]) == (
        60,
        2,
        2,
    )


def test_bad_timeouts_are_refused_naming_the_field() -> None:
    with pytest.raises(BadInput) as e:
        sm.check_remote(dataclasses.replace(REMOTE, ctrl_loss_tmo=60, reconnect_delay=90))
    assert e.value.field == "reconnect_delay"
    with pytest.raises(BadInput) as e:
        sm.check_remote(dataclasses.replace(REMOTE, ctrl_loss_tmo=True))
    assert e.value.field == "ctrl_loss_tmo"


def test_mirror_raid_has_no_superblock() -> None:
    _, p = rq.raid1_create(MID, ["a", "b"])
    assert p == {"name": MID, "raid_level": "raid1", "base_bdevs": ["a", "b"], "superblock": False}


def test_spec_checks_name_the_field() -> None:
    sm.check_spdk_mirror_spec(dataclasses.replace(SPEC, members=("nodeos_p1/v1", "nodeos_rep_0n1")))
    cases = {
        "data_offset_bytes": dataclasses.replace(SPEC, data_offset_bytes=names.MIRROR_DATA_OFFSET),
        "members": dataclasses.replace(SPEC, members=("a", "a")),
        "adopt_uuid": dataclasses.replace(SPEC, members=("a",), adopt_uuid=VOL),
        "mirror_id": dataclasses.replace(SPEC, mirror_id="md0"),
        "size_bytes": dataclasses.replace(SPEC, members=("a",), size_bytes=MIB + 1),
    }
    for field, spec in cases.items():
        with pytest.raises(BadInput) as e:
            sm.check_spdk_mirror_spec(spec)
        assert e.value.field == field


def test_rebuild_limit_in_whole_mb() -> None:
    assert sm.rebuild_limit_mb(None) == 0
    assert sm.rebuild_limit_mb(1) == 1
    assert sm.rebuild_limit_mb(51200) == 50
    with pytest.raises(BadInput):
        sm.rebuild_limit_mb(0)


def _raid_bdev(base: list[dict[str, object]], process: dict[str, object] | None = None) -> dict[str, object]:
    raid: dict[str, object] = {
        "state": "online",
        "raid_level": "raid1",
        "superblock": False,
        "base_bdevs_list": base,
    }
    if process:
        raid["process"] = process
    return {"name": MID, "block_size": 4096, "num_blocks": 16384, "driver_specific": {"raid": raid}}


def test_status_in_sync_lost_and_rebuilding() -> None:
    ok = {"name": "nodeos_p1/v1", "is_configured": True, "data_offset": 0}
    full = sm.mirror_info(MID, _raid_bdev([ok, {"name": "r1n1", "is_configured": True, "data_offset": 0}]))
    assert [m.state for m in full.members] == ["in_sync", "in_sync"] and not full.degraded
    assert full.size_bytes == 64 * MIB and full.data_offset_bytes == 0 and full.device == MID
    lost = sm.mirror_info(MID, _raid_bdev([ok, {"name": None, "is_configured": False}]))
    assert [(m.slot, m.device, m.state) for m in lost.members] == [
        (0, "nodeos_p1/v1", "in_sync"),
        (1, None, "missing"),
    ]
    assert lost.degraded
    proc = {"type": "rebuild", "target": "r1n1", "progress": {"blocks": 4096, "percent": 25}}
    back = sm.mirror_info(MID, _raid_bdev([ok, {"name": "r1n1", "is_configured": True}], proc))
    assert back.members[1].state == "rebuilding" and back.members[1].progress == 0.25
    assert back.sync_action == "rebuild" and back.degraded


def test_remotes_from_controllers() -> None:
    ctrls = [
        {
            "name": "nodeos_rep_abc",
            "ctrlrs": [
                {
                    "state": "enabled",
                    "trid": {
                        "trtype": "TCP",
                        "adrfam": "IPv4",
                        "traddr": "10.0.0.2",
                        "trsvcid": "4420",
                        "subnqn": REMOTE.nqn,
                    },
                    "host": {"nqn": REMOTE.host_nqn},
                }
            ],
        },
        {"name": "other", "ctrlrs": [{"state": "enabled", "trid": {"subnqn": "nqn.2016-06.io.spdk:cnode1"}}]},
    ]
    (r,) = sm.remote_infos(ctrls, {"nodeos_rep_abcn1": REMOTE.nguid})
    assert (r.nqn, r.device, r.nguid, r.state, r.host_nqn) == (
        REMOTE.nqn,
        "nodeos_rep_abcn1",
        REMOTE.nguid,
        "live",  # bdev_nvme's "enabled" in the kernel's word
        REMOTE.host_nqn,
    )
    assert r.listener == Listener("tcp", "10.0.0.2", "4420")


def test_namespace_bdev_is_found_by_nguid() -> None:
    assert sm.nguid_uuid(REMOTE.nguid.upper()).replace("-", "") == REMOTE.nguid


# ---- write freeze at the front end (spdk/freeze.py) --------------------------------------
def test_a_freeze_group_names_its_home_group_and_stays_within_spdks_32_groups() -> None:
    from nodeos.dataplane.mirror_names import ANA_GROUP_INACCESSIBLE, ANA_GROUP_OPTIMIZED
    from nodeos.dataplane.spdk import freeze

    for home in (ANA_GROUP_OPTIMIZED, ANA_GROUP_INACCESSIBLE):
        fg = freeze.freeze_group(home)
        assert freeze.is_freeze_group(fg) and not freeze.is_freeze_group(home)
        assert freeze.home_group(fg) == home == freeze.home_group(home)
        assert fg <= 32
    sub = {"namespaces": [{"nsid": 1, "bdev_name": "nodeos-" + "a" * 24, "anagrpid": 17}]}
    assert freeze.ns1_group(sub) == 17 and freeze.exports_bdev(sub, "nodeos-" + "a" * 24)
    assert not freeze.exports_bdev(None, "nodeos-" + "a" * 24)
