"""When a grant or revoke of a replicated volume is done (nodeos/control/views.py
`grants_in_force`): every node of the volume that is up carries the hosts; a down node is not
waited for (it is fenced and catches up when it returns); a failed replica is an error."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.control.views import grants_in_force
from nodeos.errors import OperationFailed

H1, H2 = "nqn.2014-08.org.nvmexpress:uuid:h1", "nqn.2014-08.org.nvmexpress:uuid:h2"


def _st(reported: dict[int, list[str]], health: dict[int, str] | None = None) -> tuple[dict[str, Any], Any]:
    vol = {"uuid": "u1", "name": "v", "hosts": [H1, H2], "placement": [{"node": n} for n in (1, 2, 3)]}
    nodes = {n: {"name": f"s{n}", "health": (health or {}).get(n, "up")} for n in (1, 2, 3)}
    reports = {n: {"replicas": {"u1": {"state": "in-sync", "hosts": hosts}}} for n, hosts in reported.items()}
    return {"nodes": nodes, "reports": reports, "volumes": {"u1": vol}}, vol


def test_done_once_every_node_carries_the_hosts() -> None:
    st, vol = _st({1: [H2, H1], 2: [H1, H2], 3: [H1, H2]})
    assert grants_in_force(st, vol) is True


def test_a_node_that_is_up_and_behind_is_waited_for() -> None:
    st, vol = _st({1: [H1, H2], 2: [H1], 3: [H1, H2]})
    assert grants_in_force(st, vol) is None
    st, vol = _st({1: [H1, H2], 3: [H1, H2]})  # node 2 has not reported the volume yet
    assert grants_in_force(st, vol) is None


def test_a_down_node_is_not_waited_for() -> None:
    st, vol = _st({1: [H1, H2], 2: [H1], 3: [H1, H2]}, health={2: "down"})
    assert grants_in_force(st, vol) is True


def test_a_failed_replica_names_its_node() -> None:
    st, vol = _st({1: [H1, H2], 2: [H1, H2], 3: [H1, H2]})
    st["reports"][3]["replicas"]["u1"] = {"state": "failed", "error": "no pool"}
    with pytest.raises(OperationFailed, match="on s3: no pool"):
        grants_in_force(st, vol)
