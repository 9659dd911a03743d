"""Pure decisions of the node service: names, export specs, listeners, pool and drive choice."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from nodeos.dataplane.base import Listener
from nodeos.errors import BadInput, NotFound, OperationFailed
from nodeos.node import crash, model

GiB = 1024**3


def _pool(name: str, drives: list[str], state: str = "ready") -> dict[str, Any]:
    return {"name": name, "pool_id": f"p{name}", "drives": drives, "devices": [], "state": state}


DRIVES = {
    "d1": {"id": "d1", "serial": "S1", "name": "nvme0n1", "path": "/dev/nvme0n1", "health": "ok"},
    "d2": {"id": "d2", "serial": "S2", "name": "nvme1n1", "path": "/dev/nvme1n1", "health": "failing"},
    "d3": {"id": "d3", "serial": "S3", "name": "nvme2n1", "path": "/dev/nvme2n1", "health": "unknown"},
}


def test_volume_identity_is_stable_and_well_formed() -> None:
    v = model.new_volume("v1", _pool("a", ["d1"]), 10 * GiB)
    u = uuid.UUID(v["uuid"])
    assert v["nqn"] == f"nqn.2014-08.io.nodeos:vol:{u}"
    assert v["nguid"] == u.hex and len(v["nguid"]) == 32
    assert len(v["serial"]) <= 20
    assert v["state"] == "creating" and v["hosts"] == []
    assert model.new_volume("v1", _pool("a", ["d1"]), GiB)["uuid"] != v["uuid"]


def test_export_spec_carries_only_registered_granted_hosts_with_their_keys() -> None:
    v = dict(model.new_volume("v1", _pool("a", ["d1"]), GiB), hosts=["h1", "h2", "gone"])
    hosts = {"h1": {"nqn": "h1", "dhchap_secret": "DHHC-1:00:x:"}, "h2": {"nqn": "h2", "dhchap_secret": None}}
    lst = (Listener("tcp", "192.0.2.1"),)
    spec = model.export_spec(v, lst, hosts)
    assert [(h.host_nqn, h.dhchap_key) for h in spec.hosts] == [("h1", "DHHC-1:00:x:"), ("h2", None)]
    assert spec.nqn == v["nqn"] and spec.uuid == v["uuid"] and spec.nguid == v["nguid"]
    assert spec.listeners == lst


def test_new_volume_exports_to_nobody() -> None:
    v = model.new_volume("v1", _pool("a", ["d1"]), GiB)
    assert model.export_spec(v, (), {"h1": {"nqn": "h1"}}).hosts == ()


def test_listeners_tcp_everywhere_rdma_where_a_port_is() -> None:
    lst = model.listeners(["192.0.2.1", "fd00::1"], ["tcp", "rdma"], {"192.0.2.1"})
    assert [(li.trtype, li.traddr, li.trsvcid, li.adrfam) for li in lst] == [
        ("tcp", "192.0.2.1", "4420", "ipv4"),
        ("rdma", "192.0.2.1", "4420", "ipv4"),
        ("tcp", "fd00::1", "4420", "ipv6"),
    ]
    assert model.listeners(["192.0.2.1"], ["tcp"], {"192.0.2.1"})[0].trtype == "tcp"
    assert model.listeners_json(lst)[0] == {
        "trtype": "tcp",
        "traddr": "192.0.2.1",
        "trsvcid": "4420",
        "adrfam": "ipv4",
    }


def test_choose_pool_avoids_failing_drives_and_prefers_free_space() -> None:
    pools = {"a": _pool("a", ["d1"]), "b": _pool("b", ["d2"]), "c": _pool("c", ["d3"])}
    cap = {"pa": (100 * GiB, 10 * GiB), "pb": (100 * GiB, 90 * GiB), "pc": (100 * GiB, 50 * GiB)}
    assert model.choose_pool(pools, cap, DRIVES, None, GiB).pool["name"] == "c"  # b has the failing drive
    with pytest.raises(OperationFailed, match="failing"):
        model.choose_pool(pools, cap, DRIVES, "b", GiB)
    assert model.choose_pool(pools, cap, DRIVES, "a", GiB).pool["name"] == "a"


def test_choose_pool_errors_name_their_field() -> None:
    pools = {"a": _pool("a", ["d1"]), "x": _pool("x", ["d3"], state="creating")}
    cap = {"pa": (10 * GiB, 10 * GiB)}
    with pytest.raises(NotFound) as ei:
        model.choose_pool(pools, cap, DRIVES, "nope", GiB)
    assert ei.value.field == "pool" and ei.value.allowed == ["a", "x"]
    with pytest.raises(BadInput) as ei2:
        model.choose_pool(pools, cap, DRIVES, "a", 11 * GiB)
    assert ei2.value.field == "size"
    with pytest.raises(OperationFailed):
        model.choose_pool(pools, cap, DRIVES, "x", GiB)
    with pytest.raises(BadInput, match="no pool"):
        model.choose_pool({}, {}, DRIVES, None, GiB)
    with pytest.raises(OperationFailed, match="failing"):
        model.choose_pool({"b": _pool("b", ["d2"])}, {}, DRIVES, None, GiB)


def test_pick_drives() -> None:
    assert [d["id"] for d in model.pick_drives("all", DRIVES, {})] == ["d1", "d3"]
    assert [d["id"] for d in model.pick_drives("all", DRIVES, {"d1": "a"})] == ["d3"]
    assert [d["id"] for d in model.pick_drives(["S1", "nvme2n1"], DRIVES, {})] == ["d1", "d3"]
    for req, used, exc in [
        (["zz"], {}, NotFound),
        (["d1"], {"d1": "a"}, BadInput),
        (["d2"], {}, BadInput),
        (["d1", "S1"], {}, BadInput),
    ]:
        with pytest.raises(exc) as ei:
            model.pick_drives(req, DRIVES, used)
        assert ei.value.field == "drives"
    with pytest.raises(BadInput):
        model.pick_drives("all", DRIVES, {"d1": "a", "d3": "a"})


def test_public_host_hides_the_secret() -> None:
    h = model.public_host({"nqn": "h1", "dhchap_secret": "DHHC-1:00:abc:", "added": 1.0})
    assert h == {"nqn": "h1", "dhchap": True, "tls": "off", "tls_derivation": None, "added": 1.0}
    h = model.public_host({"nqn": "h1", "tls": "required", "tls_key": "nodeos-sealed-1:x:y", "added": 1.0})
    assert h == {"nqn": "h1", "dhchap": False, "tls": "required", "tls_derivation": "standard", "added": 1.0}


def test_every_recoverable_operation_has_crash_points_and_a_policy() -> None:
    assert set(model.RECOVERY) <= set(crash.STEPS)
    for op in model.RECOVERY:
        assert crash.STEPS[op][0] == "intent" and crash.STEPS[op][-1] == "done"
    assert model.RECOVERY["volume.snapshot"] == "backward"


def test_crash_point_rejects_undeclared_names() -> None:
    with pytest.raises(AssertionError):
        crash.point("volume.create:typo")
