"""The agents' plan after a replica was re-placed (pure): the map gave the slot of node 3's replica
to node 4 at the same epoch. Node 4 makes a new replica and exports it, the primary drops the old
leg and remote and adds the new leg (a full copy), node 3 deletes its replica once the primary no
longer uses it, and the surviving secondary does nothing."""

from __future__ import annotations

from typing import Any

from nodeos.agent.plan import plan
from nodeos.node import replicas
from tests.unit.agent.test_failover_plan import pools, ready, report, steps
from tests.unit.node.test_replicas import UUID, three_node_map

# placement (2, 1, 3): node 2 is the primary at epoch 1; node 3's replica moves to node 4.


def replaced() -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The map after the move, and every node's record as it was before it."""
    st = three_node_map()
    vol = st["volumes"][UUID]
    vol["state"] = "ready"
    before = {n: ready(st, n) for n in (1, 2, 3)}
    st["nodes"][4] = {"name": "s4", "role": "storage", "state": "active"}
    st["pools"]["4/p"] = {"name": "p", "node": 4, "pool_id": "pool4", "state": "ready", "drives": ["d"]}
    st["reports"][4] = {
        "dataplane": {"listeners": [{"trtype": "tcp", "traddr": "10.0.0.4", "trsvcid": "4420"}]},
        "replicas": {},
    }
    vol["placement"][2] = {"node": 4, "pool_id": "pool4"}
    vol["in_sync"] = [2, 1]
    return st, before


def test_the_new_node_makes_a_plain_replica_of_the_ready_volume_and_exports_it() -> None:
    st, _ = replaced()
    (step,) = plan(st, 4, pools(4), {}, {})
    assert step.op == "volume.create" and "snap_id" not in step.data
    rec = step.record
    assert (rec["role"], rec["slot"], rec["epoch"], rec["state"]) == ("secondary", 2, 1, "creating")
    assert rec["primary_host_nqn"] == replicas.node_host_nqn("c" * 32, 2)
    standby = {"v": dict(rec, state="standby", lv_device="/dev/vg4/lv")}
    ((op, _),) = steps(st, 4, standby)
    assert op == "volume.replica"
    # A clone's new replica is a plain LV too: the mirror copies everything into it.
    st["volumes"][UUID]["kind"] = "clone"
    (step,) = plan(st, 4, pools(4), {}, {})
    assert step.op == "volume.create"
    # Nothing before the pool is there.
    assert plan(st, 4, {}, {}, {}) == []


def test_the_primary_drops_the_old_leg_first_and_adds_the_new_one_once_it_exports() -> None:
    st, before = replaced()
    have = before[2]
    assert [r["node"] for r in have["v"]["remotes"]] == [1, 3]
    report(st, 1, state="syncing", step=None, epoch=1)
    report(st, 2, state="degraded", epoch=1, members={1: "in-sync", 3: "failed"})
    (step,) = plan(st, 2, pools(2), have, {})
    assert step.op == "volume.rejoin"
    assert (step.data["attach"], step.data["rejoin"], step.data["detach"]) == ([1], [], [3])
    assert [r["node"] for r in step.record["remotes"]] == [1, 4] and step.record["gone"] == [3]
    assert step.record["role"] == "primary" and step.record["epoch"] == 1  # no demote: same epoch
    # Done (the rejoin clears `gone`); its mirror reports node 4's leg missing until it exports.
    done = {"v": {k: v for k, v in step.record.items() if k != "gone"}}
    report(st, 2, state="degraded", epoch=1, members={1: "in-sync", 4: "failed"})
    assert steps(st, 2, done) == []
    report(st, 4, state="syncing", step=None, epoch=1)
    ((op, data),) = steps(st, 2, done)
    assert op == "volume.rejoin" and (data["attach"], data["rejoin"], data["detach"]) == ([1, 4], [4], [])
    report(st, 2, state="degraded", epoch=1, members={1: "in-sync", 4: "syncing"}, progress={4: 0.1})
    assert steps(st, 2, done) == []
    # A rejoin that failed after its record was written still detaches the old remote next time.
    half = {"v": dict(step.record)}
    report(st, 2, state="degraded", epoch=1, members={1: "in-sync", 4: "failed"})
    ((op, data),) = steps(st, 2, half)
    assert op == "volume.rejoin" and data["detach"] == [3] and data["rejoin"] == [4]


def test_the_old_node_deletes_its_replica_only_once_the_primary_dropped_its_leg() -> None:
    st, before = replaced()
    report(st, 2, state="in-sync", epoch=1, members={1: "in-sync", 3: "in-sync"})
    assert steps(st, 3, before[3]) == []  # a drain: the primary still writes to my leg
    report(st, 2, state="degraded", epoch=1, members={1: "in-sync", 4: "failed"})
    ((op, data),) = steps(st, 3, before[3])
    assert op == "volume.delete" and data == {"name": "v"}
    # A primary that is down says nothing for the mirror: the replica goes.
    report(st, 2, state="in-sync", epoch=1, members={1: "in-sync", 3: "in-sync"})
    st["nodes"][2]["health"] = "down"
    ((op, _),) = steps(st, 3, before[3])
    assert op == "volume.delete"


def test_the_surviving_secondary_keeps_its_replica_as_it_is() -> None:
    st, before = replaced()
    report(st, 2, state="degraded", epoch=1, members={1: "in-sync", 4: "syncing"})
    assert steps(st, 1, before[1]) == []
    assert replicas.record_fields(st, st["volumes"][UUID], 1)["slot"] == before[1]["v"]["slot"]
