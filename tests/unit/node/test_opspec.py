"""Every durable operation of a node is defined once (nodeos/node/opspec.py): the node's Ops, the
recovery policy, the crash points and the agent's handling all read that one list, and a crash
point the code passes is one the list declares."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from nodeos.agent import agent
from nodeos.agent.plan import Step
from nodeos.dataplane.select import NoDataPlane
from nodeos.node import crash, model, opspec
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store
from tests.unit.node.test_orphan_ops import _direct, store  # noqa: F401 (store: a fixture)

NODE_DIR = Path(opspec.__file__).parent


def test_each_operation_is_listed_once_with_its_crash_points_from_intent_to_done() -> None:
    names = [o.name for o in opspec.OPERATIONS]
    assert len(names) == len(set(names))
    for o in opspec.OPERATIONS:
        assert o.crash_points[0] == "intent" and o.crash_points[-1] == "done", o.name
        assert o.recovery in ("forward", "backward")
    assert opspec.BY_NAME["volume.snapshot"].recovery == "backward"  # a point in time, never later
    # The agent's handling, as it was before the list (a change here is a change of behaviour).
    retried = {"volume.grant", "volume.resize", "volume.retarget", "volume.promote", "volume.demote"}
    assert set(agent.RETRIED_STEPS) == retried | {"volume.rejoin"}
    assert set(agent.CAPACITY_KEPT) == {"volume.create", "volume.clone", "volume.snapshot"}
    assert {o for o, how in model.RECOVERY.items() if how == "backward"} == {"volume.snapshot"}
    assert set(crash.STEPS) == set(opspec.BY_NAME) | {"snapshot.freeze", "host.add", "host.remove"}


def test_the_nodes_ops_run_every_listed_operation_forward_and_back(store: Store) -> None:  # noqa: F811
    # Made from the list: a name in it that Ops lacks fails here, at construction.
    ops = Ops(store, NoDataPlane(), _direct, lambda: ())
    assert set(ops.forward) == set(ops.compensate) == set(opspec.BY_NAME)
    assert ops.forward["volume.mirror"] == ops.mirrors.assemble
    assert ops.compensate["volume.demote"] == ops.mirrors.keep_for_retry
    assert all(inspect.iscoroutinefunction(ops.forward[o]) for o in opspec.BY_NAME if o != "orphan.remove")


def test_every_crash_point_the_code_passes_is_declared() -> None:
    passed = set()
    for path in NODE_DIR.glob("*.py"):
        passed |= set(re.findall(r'crash\.point\("([a-z.]+:[a-z-]+)"\)', path.read_text()))
    declared = set(crash.ALL)
    assert passed and passed <= declared, sorted(passed - declared)


def test_creates_go_together_clones_and_others_alone() -> None:
    def step(op: str, name: str) -> Step:
        return Step(op, name, {"name": name}, None, "volumes")

    steps = [step("volume.create", "a"), step("volume.create", "b"), step("volume.clone", "c"),
             step("volume.clone", "d"), step("volume.create", "e")]  # fmt: skip
    assert [[s.name for s in g] for g in agent.batches(steps)] == [["a", "b"], ["c"], ["d"], ["e"]]
