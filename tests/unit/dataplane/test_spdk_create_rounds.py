"""How a new SPDK volume's requests are grouped into round trips (issue 11): requests of one round
are pipelined together, so none may need another's answer. The SPDK facts behind the rule were
checked on a live target (tests/spdk/test_spdk_backend.py): a host is added without pausing the
subsystem; adding a namespace or a listener pauses it, and a second pause under way is refused."""

from __future__ import annotations

from nodeos.dataplane.base import Listener
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.requests import new_volume_rounds

NQN = "nqn.2014-08.io.nodeos:vol:x"
A = "nodeos_p/v1"
H1 = "nqn.2014-08.org.nvmexpress:uuid:11111111-1111-4111-8111-111111111111"
H2 = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-4222-8222-222222222222"
TCP = Listener("tcp", "10.0.0.1", "4420")
RDMA = Listener("rdma", "10.0.1.1", "4420")


def _methods(rounds: list[list[rq.Request]]) -> list[list[str]]:
    return [[m for m, _ in r] for r in rounds]


def test_the_lvol_and_its_subsystem_first_then_namespace_and_hosts_then_each_listener() -> None:
    export = [
        rq.set_qos_limit(A, 2000, 0),  # planned first: the bdev's, it needs the lvol
        rq.create_subsystem(NQN, "S1"),
        rq.add_ns(NQN, A, 1),
        rq.add_host(NQN, H1),
        rq.add_host(NQN, H2),
        rq.add_listener(NQN, TCP, "optimized"),
        rq.add_listener(NQN, RDMA, "optimized"),
    ]
    rounds = new_volume_rounds(rq.lvol_create("nodeos_p", "v1", 1 << 30), export)
    assert _methods(rounds) == [
        ["bdev_lvol_create", "nvmf_create_subsystem"],
        ["bdev_set_qos_limit", "nvmf_subsystem_add_ns", "nvmf_subsystem_add_host", "nvmf_subsystem_add_host"],
        ["nvmf_subsystem_add_listener"],
        ["nvmf_subsystem_add_listener"],
    ]
    assert sorted(map(str, (r for rd in rounds for r in rd))) == sorted(  # each request once
        map(str, [rq.lvol_create("nodeos_p", "v1", 1 << 30), *export])
    )


def test_a_volume_without_an_export_is_its_lvol_alone() -> None:
    new = rq.lvol_create("nodeos_p", "v1", 1 << 30)
    assert new_volume_rounds(new, []) == [[new]]
