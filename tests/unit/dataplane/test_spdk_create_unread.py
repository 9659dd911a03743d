"""What the SPDK create path no longer reads back (issue 11: 4 RPCs a volume, as a hand-made one)
must be what the real target shows: checked against the transcript recorded from SPDK v26.05
(../shared/spdk/rpc-transcript-v26.05.jsonl, read in place). The same on a live target:
tests/spdk/test_spdk_backend.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeos.dataplane.base import Listener
from nodeos.dataplane.spdk import parse
from tests.unit.dataplane.spdk_replay import load_transcript

MIB = 1024 * 1024
GIB = 1024 * MIB
H1 = "nqn.2014-08.org.nvmexpress:uuid:11111111-1111-4111-8111-111111111111"
H2 = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-4222-8222-222222222222"


@pytest.fixture(scope="module")
def recorded(shared_dir: Path) -> list[dict[str, Any]]:
    return load_transcript(shared_dir)


def _answer(recorded: list[dict[str, Any]], method: str, **params: Any) -> Any:
    for e in recorded:
        r, answer = e["request"], e["response"]
        if r["method"] == method and "result" in answer and params.items() <= r.get("params", {}).items():
            return answer["result"]
    raise AssertionError(f"no recorded answer to {method} {params}")


def test_bdev_lvol_create_answers_the_uuid_the_lvol_bdev_is_named_by(recorded: list[dict[str, Any]]) -> None:
    made = _answer(recorded, "bdev_lvol_create", lvol_name="lvol0")
    lvols = {lv["alias"]: lv for lv in _answer(recorded, "bdev_lvol_get_lvols", lvs_name="lvs0")}
    assert lvols["lvs0/lvol0"]["uuid"] == made
    # A bdev of an lvol is named by that UUID (the clone here: made the same way, read back).
    clone = _answer(recorded, "bdev_lvol_clone", clone_name="clone0")
    (b,) = _answer(recorded, "bdev_get_bdevs", name="lvs0/clone0")
    assert b["name"] == clone and b["aliases"] == ["lvs0/clone0"]


def test_an_lvols_size_is_the_request_in_whole_clusters(recorded: list[dict[str, Any]]) -> None:
    (lvs,) = _answer(recorded, "bdev_lvol_get_lvstores")
    asked = 512 * MIB
    _answer(recorded, "bdev_lvol_create", lvol_name="lvol0", size_in_mib=512)
    (clone,) = _answer(recorded, "bdev_get_bdevs", name="lvs0/clone0")  # lvol0's size, cloned
    assert parse.lvol_size(asked, lvs["cluster_size"]) == parse.bdev_size(clone) == 512 * MIB
    cs = 4 * MIB
    assert parse.lvol_size(1, cs) == 4 * MIB
    assert parse.lvol_size(61 * MIB + 1, cs) == 64 * MIB  # 62 MiB sent, 16 clusters made
    assert parse.lvol_size(GIB, cs) == GIB
    assert parse.lvol_size(GIB + 1, 1 * MIB) == GIB + MIB  # sent in whole MiB


def test_a_subsystem_made_from_nothing_reads_as_the_recorded_one(recorded: list[dict[str, Any]]) -> None:
    """cnode2 was made as apply_export makes one: subsystem, namespace 1 over an lvol, ANA group
    1, one TCP listener, no host."""
    subs = {s["nqn"]: s for s in _answer(recorded, "nvmf_get_subsystems")}
    real = subs["nqn.2016-06.io.spdk:cnode2"]
    lvol = real["namespaces"][0]["bdev_name"]
    made = parse.made_subsystem(real["nqn"], lvol, 1, (Listener("tcp", "127.0.0.1", "4420"),), {})
    for read in (
        lambda s: [parse.listener_of(a) for a in s["listen_addresses"]],
        lambda s: parse.subsystem_hosts(s),
        lambda s: {k: parse.subsystem_ns1(s)[k] for k in ("nsid", "bdev_name", "name", "anagrpid")},
    ):
        assert read(made) == read(real)
    assert made["listen_addresses"] == real["listen_addresses"]


def test_a_made_subsystem_lists_its_hosts_with_their_keys() -> None:
    v6 = Listener("rdma", "fd00::1", "4421", "ipv6")
    made = parse.made_subsystem(
        "nqn.2014-08.io.nodeos:vol:x", "u-u-i-d", 3, (v6,), {H1: "nodeos-k1", H2: None}
    )
    assert parse.subsystem_hosts(made) == {H1: "nodeos-k1", H2: None}
    assert [parse.listener_of(a) for a in made["listen_addresses"]] == [v6]
    assert parse.subsystem_ns1(made)["anagrpid"] == 3
