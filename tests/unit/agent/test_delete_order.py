"""A replicated volume's delete is ordered through the map (issue 25, the README demo's hang): the
primary tears its mirror down first, each secondary removes its replica export only once the
primary's report no longer holds the volume, or the primary is down, or the agent's bound
passed. Before, every node planned its delete at once, and a replica whose export (and nvmet
port) vanished under the primary's md held md's superblock write, and with it the delete."""

from __future__ import annotations

from typing import Any

from nodeos.agent.plan import plan, waits_for_primary
from tests.unit.agent.test_failover_plan import pools, ready, report
from tests.unit.node.test_replicas import UUID, three_node_map

# placement (2, 1, 3): node 2 is the primary.


def deleting() -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    st = three_node_map()
    vol = st["volumes"][UUID]
    vol["state"] = "ready"
    recs = {n: ready(st, n) for n in (1, 2, 3)}
    for n in (1, 3):
        report(st, n, state="syncing", step=None, epoch=1)
    report(st, 2, state="in-sync", epoch=1, members={1: "in-sync", 3: "in-sync"})
    vol["state"] = "deleting"
    return st, recs


def ops(
    st: dict[str, Any], me: int, recs: dict[int, dict[str, Any]], overdue: frozenset[str] = frozenset()
) -> list[str]:
    return [s.op for s in plan(st, me, pools(me), recs[me], {}, overdue=overdue)]


def test_the_primary_tears_down_first_and_its_secondaries_wait_for_it() -> None:
    st, recs = deleting()
    assert ops(st, 2, recs) == ["volume.delete"]
    for n in (1, 3):
        assert ops(st, n, recs) == []
        assert waits_for_primary(st, recs[n]["v"], n) == "delete: waiting for primary s2 to stop its mirror"


def test_a_secondary_goes_once_the_primarys_report_no_longer_holds_the_volume() -> None:
    st, recs = deleting()
    del st["reports"][2]["replicas"][UUID]  # the primary's teardown finished, its record is gone
    for n in (1, 3):
        assert ops(st, n, recs) == ["volume.delete"]
        assert waits_for_primary(st, recs[n]["v"], n) is None


def test_a_secondary_goes_when_the_primary_is_down() -> None:
    st, recs = deleting()
    st["nodes"][2]["health"] = "down"
    assert ops(st, 1, recs) == ["volume.delete"]


def test_a_secondary_goes_once_its_wait_is_overdue() -> None:
    st, recs = deleting()
    assert ops(st, 3, recs, overdue={UUID}) == ["volume.delete"]
    assert ops(st, 1, recs, overdue={"another"}) == []


def test_a_volume_that_is_not_being_deleted_and_a_single_copy_never_wait() -> None:
    st, recs = deleting()
    st["volumes"][UUID]["state"] = "ready"
    assert waits_for_primary(st, recs[1]["v"], 1) is None
    st["volumes"][UUID]["state"] = "deleting"
    st["volumes"][UUID]["replicas"] = 1
    assert waits_for_primary(st, recs[1]["v"], 1) is None
