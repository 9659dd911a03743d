"""SPDK contract tests: a REPLAY of the transcript recorded against a real SPDK v26.05.

1. Our request builders produce exactly the requests the real target accepted.
2. Sent through our client (nodeos/dataplane/spdk/client.py) over a real unix socket
   to ReplayedSpdkTarget, they get the recorded answers, and our parsers read them.
3. Every recorded error maps to a clear nodeos error (class, object named, field).
4. Methods the recording lacks: our parameter names are ones the `spdk` package's CLI uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.dataplane.base import Listener
from nodeos.dataplane.ids import check_nqn
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.dataplane.spdk.client import SpdkRpc, SpdkRpcError
from nodeos.dataplane.spdk.errors import map_error
from nodeos.dataplane.spdk.requests import check_qos
from nodeos.dataplane.spec_checks import check_ana_state
from nodeos.errors import AlreadyExists, BadInput, EnvironmentProblem, NotFound, OperationFailed
from tests.unit.dataplane.spdk_replay import ReplayedSpdkTarget, load_transcript
from tests.unit.dataplane.spdk_schema import cli_params

MIB = 1024 * 1024
CNODE1 = "nqn.2016-06.io.spdk:cnode1"
CNODE2 = "nqn.2016-06.io.spdk:cnode2"
LOOP = Listener(trtype="tcp", traddr="127.0.0.1", trsvcid="4420")

# transcript line -> the same request built by our code
BUILT: dict[int, rq.Request] = {
    0: rq.get_version(),
    2: rq.malloc_create_for_tests("Malloc0", 262144, 4096),
    3: rq.aio_create_for_tests("/path/to/aio0.img", "AIO0", 4096),
    4: rq.lvstore_create("AIO0", "lvs0"),
    5: rq.lvol_create("lvs0", "lvol0", 512 * MIB),
    6: rq.lvol_snapshot("lvs0/lvol0", "snap0"),
    7: rq.lvol_clone("lvs0/snap0", "clone0"),
    8: rq.get_lvstores(),
    9: rq.get_lvols("lvs0"),
    10: rq.get_bdevs("lvs0/clone0"),
    11: rq.create_transport("tcp"),
    12: rq.get_transports(),
    13: rq.create_subsystem(CNODE1, "SPDK00000000000001", "SPDK peer malloc", allow_any_host=True),
    14: rq.add_ns(CNODE1, "Malloc0", 1),
    15: rq.add_listener(CNODE1, LOOP),
    16: rq.create_subsystem(CNODE2, "SPDK00000000000002", "SPDK peer lvol clone", allow_any_host=True),
    17: rq.add_ns(CNODE2, "lvs0/clone0", 1, anagrpid=1),
    18: rq.add_listener(CNODE2, LOOP),
    19: rq.set_ana_state(CNODE1, LOOP, "non-optimized", 1),
    20: rq.get_listeners(CNODE1),
    21: rq.set_ana_state(CNODE1, LOOP, "optimized"),
    23: rq.add_listener(rq.DISCOVERY_NQN, LOOP),
    24: rq.get_subsystems(),
    37: rq.lvol_snapshot("lvs0/lvol0", "snap0"),
    38: rq.lvol_delete("lvs0/snap0"),
    43: rq.create_transport("tcp"),
    44: rq.create_transport("rdma"),
}


@pytest.fixture(scope="module")
def transcript(shared_dir: Path) -> list[dict[str, Any]]:
    return load_transcript(shared_dir)


@pytest.fixture
def replay(transcript: list[dict[str, Any]], tmp_path: Path) -> Iterator[ReplayedSpdkTarget]:
    target = ReplayedSpdkTarget(transcript, tmp_path / "spdk.sock")
    yield target
    target.close()


@pytest.fixture
def rpc(replay: ReplayedSpdkTarget) -> Iterator[SpdkRpc]:
    client = SpdkRpc(str(replay.sock_path), timeout=10)
    yield client
    client.close()


def _params(entry: dict[str, Any]) -> dict[str, Any]:
    return entry["request"].get("params", {})


@pytest.mark.parametrize("line", sorted(BUILT))
def test_builder_reproduces_recorded_request(transcript: list[dict[str, Any]], line: int) -> None:
    method, params = BUILT[line]
    assert (method, params) == (transcript[line]["request"]["method"], _params(transcript[line]))


def test_builders_replayed_through_client_get_the_real_answers(
    transcript: list[dict[str, Any]], replay: ReplayedSpdkTarget, rpc: SpdkRpc
) -> None:
    for line in sorted(k for k in BUILT if not transcript[k]["expect_error"]):
        assert rpc.call(*BUILT[line]) == transcript[line]["response"]["result"], transcript[line]["note"]
    assert replay.unmatched == []


def test_parsers_read_the_recorded_answers(rpc: SpdkRpc) -> None:
    for line in range(0, 10):
        if line in BUILT:
            rpc.call(*BUILT[line])
    (clone,) = rpc.call(*rq.get_bdevs("lvs0/clone0"))
    assert parse.bdev_size(clone) == 512 * MIB
    assert parse.lvol_alias(clone) == "lvs0/clone0"
    lv = parse.bdev_lvol(clone)
    assert lv is not None and lv["base_snapshot"] == "snap0"
    assert parse.lvol_kind(lv) == "clone"
    for line in range(11, 20):
        rpc.call(*BUILT[line])
    (entry,) = rpc.call(*rq.get_listeners(CNODE1))
    assert parse.listener_of(entry["address"]) == LOOP
    assert parse.listener_ana(entry, 1) == "non-optimized"
    assert parse.listener_ana(entry, 2) == "optimized"
    rpc.call(*BUILT[21])
    subs = {s["nqn"]: s for s in rpc.call(*rq.get_subsystems())}
    ns = parse.subsystem_ns1(subs[CNODE2])
    assert ns is not None and ns["uuid"] == "c14b8b0c-9ac0-4ba9-b09f-69a09fccaaf0"
    assert parse.subsystem_hosts(subs[CNODE1]) == {}


# transcript line -> (error class, words the message must contain, field)
ERRORS: dict[int, tuple[type[Exception], tuple[str, ...], str | None]] = {
    25: (OperationFailed, (CNODE1, "exists already", "subsystem limit"), "nqn"),
    26: (OperationFailed, ("NoSuchBdev", CNODE1), None),
    27: (OperationFailed, ("not-a-valid-nqn",), "nqn"),
    28: (OperationFailed, ("could not create subsystem",), "nqn"),
    29: (OperationFailed, ("nqn.2016-06.io.spdk:nosuch", "does not exist"), None),
    30: (OperationFailed, ("namespace id is taken",), None),
    31: (AlreadyExists, ("127.0.0.1:4420", "exists already"), "listeners"),
    32: (OperationFailed, ("'bogus'",), "ana_state"),
    33: (OperationFailed, ("ANA group 99", "no namespace"), "ana_group"),
    34: (AlreadyExists, ("Malloc0", "exists already"), None),
    35: (OperationFailed, ("MallocBad", "rejected"), None),
    36: (NotFound, ("nosuchlvs", "pool"), "pool_id"),
    37: (AlreadyExists, ("snap0",), None),
    38: (OperationFailed, ("lvs0/snap0", "clones"), None),
    39: (NotFound, ("AIO1", "file"), None),
    40: (OperationFailed, ("nvmf_create_subsystem",), "nqn"),
    41: (OperationFailed, ("cnode9",), "nqn"),
    42: (EnvironmentProblem, ("no_such_method",), None),
    43: (AlreadyExists, ("TCP",), "trtype"),
    44: (EnvironmentProblem, ("RDMA", "TCP still works"), "trtype"),
}


def test_every_recorded_error_is_covered(transcript: list[dict[str, Any]]) -> None:
    assert {i for i, e in enumerate(transcript) if e["expect_error"]} == set(ERRORS)


@pytest.mark.parametrize("line", sorted(ERRORS))
def test_recorded_error_maps_to_clear_error(
    transcript: list[dict[str, Any]], rpc: SpdkRpc, line: int
) -> None:
    entry = transcript[line]
    req = entry["request"]
    # A duplicate is refused only after the original: replay the recorded original first.
    for earlier in transcript[:line]:
        same = (earlier["request"]["method"], _params(earlier)) == (req["method"], req.get("params", {}))
        if same and not earlier["expect_error"]:
            rpc.call(req["method"], req.get("params"))
    with pytest.raises(SpdkRpcError) as caught:
        rpc.call(req["method"], req.get("params"))
    e = caught.value
    assert (e.code, e.message) == (entry["response"]["error"]["code"], entry["response"]["error"]["message"])
    cls, words, field = ERRORS[line]
    mapped = map_error(e.method, e.params, e.code, e.message)
    assert type(mapped) is cls, entry["note"]
    for w in (words,) if isinstance(words, str) else words:
        assert w in mapped.message, (entry["note"], mapped.message)
    assert mapped.field == field
    # SPDK's own words stay in the message for the operator who reads the target's log.
    assert str(e.code) in mapped.message


def test_inputs_spdk_answers_vaguely_are_refused_before_any_call(transcript: list[dict[str, Any]]) -> None:
    for line in (27, 28):  # bad NQN: SPDK only says "Unable to create subsystem"
        with pytest.raises(BadInput) as e:
            check_nqn(_params(transcript[line])["nqn"])
        assert e.value.field == "nqn"
    with pytest.raises(BadInput) as e2:  # line 32: SPDK says "Invalid parameters"
        check_ana_state(_params(transcript[32])["ana_state"])
    assert e2.value.field == "ana_state" and "optimized" in e2.value.allowed
    with pytest.raises(BadInput) as e3:
        check_qos(1500, None)
    assert e3.value.field == "qos_iops"


def test_backend_reports_rdma_failure_and_keeps_tcp(replay: ReplayedSpdkTarget) -> None:
    dp = SpdkDataPlane(str(replay.sock_path), transports=("tcp", "rdma"))
    try:
        errors = dp.ensure_transports()
    finally:
        dp.close()
    assert set(errors) == {"rdma"}
    assert "RDMA" in errors["rdma"] and "TCP still works" in errors["rdma"]
    assert [r["method"] for r in replay.received] == ["nvmf_get_transports", "nvmf_create_transport"]
    assert replay.received[1]["params"] == {"trtype": "RDMA"}
    assert replay.unmatched == []


UNRECORDED: list[rq.Request] = [
    rq.nvme_attach_pcie("nvme_0000010000", "0000:01:00.0"),
    rq.nvme_health("nvme_0000010000"),
    rq.aio_create_for_tests("/path/to/aio0.img", "AIO0", 4096, uuid="57025168-8e66-500c-9685-b0f112b7ad50"),
    rq.nvme_detach("nvme_0000010000"),
    rq.nvme_get_controllers(),
    rq.raid_get_bdevs("all"),
    rq.raid0_create("nodeos_p_raid0", ["A", "B"]),
    rq.raid_delete("nodeos_p_raid0"),
    rq.set_qos_limit("nodeos_p/v", 10000, 100),
    rq.lvstore_delete("nodeos_p"),
    rq.get_lvstores("nodeos_p"),
    rq.lvol_resize("nodeos_p/v", 10 * MIB),
    rq.delete_subsystem(CNODE1),
    rq.get_subsystems(CNODE1),
    rq.remove_ns(CNODE1, 1),
    rq.remove_listener(CNODE1, LOOP),
    rq.add_host(CNODE1, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001", "k1"),
    rq.remove_host(CNODE1, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"),
    rq.get_controllers(CNODE1),
    rq.keyring_add("k1", "/var/lib/nodeos/spdk-keys/k1"),
    rq.keyring_remove("k1"),
    rq.keyring_get_keys(),
    rq.add_ns(
        CNODE1,
        "nodeos_p/v",
        1,
        uuid="c14b8b0c-9ac0-4ba9-b09f-69a09fccaaf0",
        nguid="c14b8b0c9ac04ba9b09f69a09fccaaf0",
        anagrpid=2,
    ),
    rq.create_subsystem(CNODE1, "S1", "nodeos volume", min_cntlid=1, max_cntlid=100),
    rq.set_ns_ana_group(CNODE1, 1, 17),
    rq.add_referral(LOOP),
    rq.remove_referral(LOOP),
    rq.get_referrals(),
]


@pytest.mark.parametrize("req", UNRECORDED, ids=lambda r: r[0])
def test_unrecorded_methods_use_the_spdk_packages_parameter_names(req: rq.Request) -> None:
    pytest.importorskip("spdk.cli")
    method, params = req
    known = cli_params().get(method)
    assert known is not None, f"the spdk package has no RPC {method}"
    for key, value in params.items():
        assert key in known, f"{method}: {key} is not a parameter the spdk package sends"
        if isinstance(value, dict):
            assert set(value) <= known, f"{method}.{key}: {set(value) - known}"


def test_listen_address_shape_matches_recorded(transcript: list[dict[str, Any]]) -> None:
    assert rq.listen_address(LOOP) == _params(transcript[15])["listen_address"]
    v6 = Listener(trtype="rdma", traddr="fd00::1", adrfam="ipv6")
    assert rq.listen_address(v6) == {
        "trtype": "RDMA",
        "adrfam": "IPv6",
        "traddr": "fd00::1",
        "trsvcid": "4420",
    }
