"""Discovery referrals on every transport (issue 28): each discovery port refers to the other
nodes' ports of its own transport, RDMA as TCP."""

from __future__ import annotations

from nodeos.agent import referral_plan
from nodeos.dataplane.base import Listener


def _li(trtype: str, addr: str) -> dict[str, str]:
    return {"trtype": trtype, "traddr": addr, "trsvcid": "4420", "adrfam": "ipv4"}


def _st() -> dict[str, object]:
    reports = {
        n: {"dataplane": {"listeners": [_li("tcp", f"10.0.0.{n}"), _li("rdma", f"10.0.1.{n}")]}}
        for n in (1, 2, 3)
    }
    reports[4] = {"dataplane": {"listeners": [_li("tcp", "10.0.0.4")]}}  # a node without RDMA
    reports[5] = {}  # one that has not reported yet
    return {"reports": reports}


def test_every_discovery_port_refers_to_the_others_of_its_transport() -> None:
    st = _st()
    mine = referral_plan.mine([_li("tcp", "10.0.0.1"), _li("rdma", "10.0.1.1"), _li("tcp", "10.0.0.1")])
    plan = dict(referral_plan.per_port(mine, referral_plan.others(st, 1), "8009"))
    assert plan == {
        Listener("rdma", "10.0.1.1", "8009"): (
            Listener("rdma", "10.0.1.2", "8009"),
            Listener("rdma", "10.0.1.3", "8009"),
        ),
        Listener("tcp", "10.0.0.1", "8009"): tuple(Listener("tcp", f"10.0.0.{n}", "8009") for n in (2, 3, 4)),
    }


def test_a_node_without_rdma_has_no_rdma_port_and_nothing_else_is_referred() -> None:
    st = _st()
    plan = referral_plan.per_port(
        referral_plan.mine([_li("tcp", "10.0.0.4")]), referral_plan.others(st, 4), "8009"
    )
    assert [p for p, _ in plan] == [Listener("tcp", "10.0.0.4", "8009")]
    assert all(r.trtype == "tcp" for r in plan[0][1]) and len(plan[0][1]) == 3
    assert referral_plan.mine([{"trtype": "fc", "traddr": "x"}]) == ()
