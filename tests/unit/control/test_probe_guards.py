"""The control plane's side of issue 25's probes, without processes: on a node without a data
plane a name that does not exist is not found (exit 2) before "no data plane" (probe 6); one
request may not both set and remove a label (probe 8, the API's own check); the leader seals a
host's DH-HMAC-CHAP secret before it proposes host.add, so no plain secret reaches the Raft
log (probe 10). The process tests (tests/process/test_console_probes.py,
test_host_secrets_sealed.py) see the same through the console and the disk."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from nodeos.cluster.map import ClusterMap
from nodeos.control.service import ControlService
from nodeos.errors import BadInput, NotFound, NotSupported
from nodeos.storage.storage_map import label_conflicts

HOST = "nqn.2014-08.com.example:gpu1"
SECRET = "DHHC-1:00:cXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFjqMkU:"


class Driver:
    """The leader's view: a map, a read barrier, proposals recorded and applied."""

    def __init__(self) -> None:
        self.id = 1
        self.map = ClusterMap()
        self.proposed: list[bytes] = []

    async def read_barrier(self, timeout: float) -> None:
        return None

    async def propose(self, data: bytes, timeout: float) -> Any:
        self.proposed.append(data)
        out = self.map.apply(self.map.applied_index + 1, data)
        if "error" in out:
            raise BadInput(out["error"]["message"])
        return out["result"]


def _witness() -> tuple[ControlService, Driver]:
    """A ControlService of a node without a data plane, alone in its cluster."""
    ctx: Any = SimpleNamespace(
        dataplane=None, dataplane_reason="witness (--dataplane none)", services={}, config={}
    )
    svc = ControlService(ctx)
    d = Driver()
    d.map.state["nodes"][d.id] = {"name": "n1", "labels": {}}  # this node, a member (as after init)
    svc.cluster = SimpleNamespace(driver=d)
    return svc, d


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("volume.delete", {"name": "NOSUCH"}, "name"),
        ("volume.resize", {"name": "NOSUCH", "size": 2 << 30}, "name"),
        ("volume.snapshot", {"name": "NOSUCH", "snapshot": "s1"}, "name"),
        ("volume.clone", {"snapshot": "NOSUCH", "name": "c1"}, "snapshot"),
        ("volume.publish", {"snapshot": "NOSUCH", "name": "p1"}, "snapshot"),
        ("volume.unpublish", {"name": "NOSUCH"}, "name"),
        ("volume.grant", {"name": "NOSUCH", "host": HOST}, "name"),
        ("volume.revoke", {"name": "NOSUCH", "host": HOST}, "name"),
        ("pool.delete", {"name": "NOSUCH"}, "name"),
    ],
)
def test_a_missing_name_is_not_found_before_no_data_plane(
    method: str, params: dict[str, Any], field: str
) -> None:
    svc, d = _witness()
    with pytest.raises(NotFound) as e:
        asyncio.run(svc.methods()[method](params))
    assert e.value.field == field and e.value.exit_code == 2 and "NOSUCH" in e.value.message
    assert d.proposed == []


def test_a_create_on_a_cluster_without_storage_still_says_no_data_plane() -> None:
    svc, _ = _witness()
    with pytest.raises(NotSupported) as e:
        asyncio.run(svc.methods()["volume.create"]({"name": "v1", "size": 1 << 30}))
    assert e.value.field == "dataplane"


@pytest.mark.parametrize(
    ("set_", "remove"), [({"rack": "a"}, ["rack"]), ({"rack": "b", "row": "1"}, ["rack"])]
)
def test_one_request_may_not_set_and_remove_one_label(set_: dict[str, str], remove: list[str]) -> None:
    with pytest.raises(BadInput) as e:
        label_conflicts(set_, remove)
    assert e.value.field == "labels" and "'rack'" in e.value.message
    label_conflicts({"rack": "a"}, ["row"])  # different keys: fine


def test_the_leader_seals_a_host_secret_before_it_proposes() -> None:
    svc, d = _witness()
    sealed_for: list[tuple[str, str]] = []

    async def seal_host_secret(driver: Any, nqn: str, secret: str) -> str:
        sealed_for.append((nqn, secret))
        return "sealed:v1:opaque"

    svc.cluster.seal_host_secret = seal_host_secret
    req = {"op": "host.add", "params": {"nqn": HOST, "dhchap_secret": SECRET}}
    asyncio.run(svc._at_leader(d, req, 5.0))
    assert sealed_for == [(HOST, SECRET)]
    assert d.proposed and all(SECRET.encode() not in cmd and b"cXFxcXFx" not in cmd for cmd in d.proposed)
    assert d.map.state["hosts"][HOST]["dhchap_secret"] == "sealed:v1:opaque"
