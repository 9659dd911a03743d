"""When a node reports: which changes go at once (an operation waits for them) and which wait
for the spacing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeos.agent.urgency import urgent

BASE: dict[str, Any] = {
    "dataplane": {"name": "spdk", "listeners": [{"trtype": "tcp", "traddr": "10.0.0.1"}], "error": None},
    "drives": {"d1": {"state": "in-use"}},
    "pools": {"p1": {"name": "p", "state": "ready", "size_bytes": 100, "free_bytes": 50}},
    "replicas": {
        "v1": {
            "state": "in-sync",
            "step": None,
            "size_bytes": 64,
            "hosts": ["h1"],
            "epoch": 2,
            "members": {"1": "in-sync", "2": "syncing"},
            "progress": {"2": 0.25},
        },
    },
    "snapshots": {"s1": {"state": "creating"}},
    "published": {
        "m1": {"state": "copying", "progress": 0.1, "sha256": None, "hosts": None, "connected": []}
    },
    "storage_addresses": ["10.0.0.1"],
}


def changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    obj = body
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return body


@pytest.mark.parametrize(
    "path,value",
    [
        (("replicas", "v2"), {"state": "in-sync", "step": None, "size_bytes": 64, "hosts": []}),  # created
        (("replicas", "v1", "state"), "degraded"),
        (("replicas", "v1", "size_bytes"), 96),  # grown: `volume resize` waits for it
        (("replicas", "v1", "hosts"), ["h1", "h2"]),  # granted
        (("replicas", "v1", "members"), {"1": "in-sync", "2": "in-sync"}),  # a leg in sync
        (("replicas", "v1", "frozen"), "s1"),
        (("pools", "p1", "state"), "failed"),
        (("snapshots", "s1", "state"), "ready"),
        (("published", "m1", "state"), "ready"),
    ],
)
def test_a_change_an_operation_waits_for_is_urgent(path: tuple[str, ...], value: Any) -> None:
    assert urgent(BASE, changed(path, value))


@pytest.mark.parametrize(
    "path,value",
    [
        (("replicas", "v1", "progress"), {"2": 0.5}),
        (("pools", "p1", "free_bytes"), 40),
        (("published", "m1", "progress"), 0.2),
        (("published", "m1", "connected"), ["h1"]),
        (("dataplane", "listeners"), []),
        (("drives",), {}),
    ],
)
def test_counters_and_figures_wait_for_the_spacing(path: tuple[str, ...], value: Any) -> None:
    assert not urgent(BASE, changed(path, value))


def test_the_first_report_and_a_removed_replica_are_urgent() -> None:
    assert urgent(None, BASE)
    assert urgent(BASE, changed(("replicas",), {}))
    assert not urgent(BASE, copy.deepcopy(BASE))
