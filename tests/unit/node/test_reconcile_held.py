"""A node's re-export (its start, or its target back empty) holds the target's ports until it is
done (nodeos/node/service.py, _ports_held; the kernel side in
tests/unit/dataplane/test_kernel_listen_hold.py): whatever the re-export meets, the ports are
released after it, and a data plane that cannot hold is re-exported as before. At a start the
hold spans recovery, every try and the agent's first pass (bounded), so a volume whose LV shows
only at a later try, or one the map moved while the node was away, is linked with the others, not
after the port listens."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from nodeos.errors import OperationFailed
from nodeos.node.service import NodeService


class Recorder:
    def __init__(self, fail_release: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_release = fail_release

    async def call(self, method: str, *args: Any) -> None:
        self.calls.append(method)
        if method == "release_listeners" and self.fail_release:
            raise OperationFailed("a port could not listen")


def _node(dp: Any, ops: Recorder, fail: bool = False, missing_tries: int = 0) -> Any:
    tries = {"n": 0}

    async def reconcile() -> dict[str, Any]:
        ops.calls.append("reconcile")
        if fail:
            raise RuntimeError("the re-export broke half-way")
        tries["n"] += 1
        return {"errors": [], "missing": ["v1"] if tries["n"] <= missing_tries else []}

    async def recover() -> list[Any]:
        ops.calls.append("recover")
        return []

    ops.recover = recover  # type: ignore[attr-defined]
    node = SimpleNamespace(dp=dp, ops=ops, _reconcile=reconcile)
    node._ports_held = lambda: NodeService._ports_held(node)
    node._hold_ports = lambda: NodeService._hold_ports(node)
    node._release_ports = lambda held: NodeService._release_ports(node, held)
    return node


def test_the_ports_are_held_around_the_re_export() -> None:
    ops = Recorder()
    rep = asyncio.run(NodeService._reconcile_held(_node(SimpleNamespace(hold_listeners=None), ops)))
    assert ops.calls == ["hold_listeners", "reconcile", "release_listeners"] and rep["errors"] == []


def test_a_re_export_that_breaks_still_releases_the_ports() -> None:
    ops = Recorder()
    with pytest.raises(RuntimeError):
        asyncio.run(NodeService._reconcile_held(_node(SimpleNamespace(hold_listeners=None), ops, fail=True)))
    assert ops.calls == ["hold_listeners", "reconcile", "release_listeners"]


def test_a_release_that_fails_is_logged_and_the_report_kept() -> None:
    ops = Recorder(fail_release=True)
    rep = asyncio.run(NodeService._reconcile_held(_node(SimpleNamespace(hold_listeners=None), ops)))
    assert rep == {"errors": [], "missing": []}


def test_a_data_plane_that_cannot_hold_is_re_exported_as_before() -> None:
    ops = Recorder()
    asyncio.run(NodeService._reconcile_held(_node(SimpleNamespace(), ops)))
    assert ops.calls == ["reconcile"]


def test_a_start_re_exports_through_recovery_and_every_try(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nodeos.node.service.STARTUP_RECONCILE_PAUSE_S", 0.0)
    ops = Recorder()
    node = _node(SimpleNamespace(hold_listeners=None), ops, missing_tries=2)
    asyncio.run(NodeService._startup_reexport(node))
    assert ops.calls == ["recover", "reconcile", "reconcile", "reconcile"], (
        "the volume missing at the first two tries is found at the third, the ports held by start"
    )


def _starting(ops: Recorder, agent: Any) -> Any:
    node = _node(SimpleNamespace(hold_listeners=None), ops)
    node.agent, node.lock = agent, asyncio.Lock()
    node._map_may_move_mine = lambda: True
    return node


def test_a_start_keeps_the_ports_held_until_the_agents_first_pass() -> None:
    async def run() -> list[str]:
        ops, agent = Recorder(), SimpleNamespace(passes=0)
        task = asyncio.create_task(NodeService._release_after_first_pass(_starting(ops, agent), True))
        await asyncio.sleep(0.5)
        assert ops.calls == [], "released before the agent's first pass made what the map moved"
        agent.passes += 1
        await asyncio.wait_for(task, 2.0)
        return ops.calls

    assert asyncio.run(run()) == ["release_listeners"]


def test_an_agent_that_never_passes_holds_the_ports_only_for_the_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("nodeos.node.service.FIRST_PASS_HOLD_S", 0.3)
    ops = Recorder()
    asyncio.run(NodeService._release_after_first_pass(_starting(ops, SimpleNamespace(passes=0)), True))
    assert ops.calls == ["release_listeners"] and "without the agent's first pass" in caplog.text
    ops = Recorder()
    asyncio.run(NodeService._release_after_first_pass(_starting(ops, None), False))
    assert ops.calls == [], "nothing held (a data plane that cannot hold): nothing to release"


def test_a_node_with_nothing_the_map_could_have_moved_releases_at_once() -> None:
    """A new node, or one with no replicated volume: its start never waits for the agent (a lab
    or a demo creates and connects volumes right after the daemons start)."""
    ops = Recorder()
    node = _starting(ops, SimpleNamespace(passes=0))
    node._map_may_move_mine = lambda: False
    asyncio.run(asyncio.wait_for(NodeService._release_after_first_pass(node, True), 1.0))
    assert ops.calls == ["release_listeners"]
    member = SimpleNamespace(id=1, map=SimpleNamespace(nodes={1: {}}))
    vols = {"a": {"replicas": 1}, "b": {"replicas": 2}}
    svc = SimpleNamespace(cluster=SimpleNamespace(driver=member), _all=lambda db: vols)
    assert NodeService._map_may_move_mine(svc)
    vols.pop("b")
    assert not NodeService._map_may_move_mine(svc)
    svc.cluster.driver = SimpleNamespace(id=2, map=SimpleNamespace(nodes={1: {}}))
    vols["b"] = {"replicas": 3}
    assert not NodeService._map_may_move_mine(svc), "not a member yet: no pass will come"
