"""A node's re-export (its start, or its target back empty) holds the target's ports until it is
done (nodeos/node/service.py, _ports_held; the kernel side in
tests/unit/dataplane/test_kernel_listen_hold.py): whatever the re-export meets, the ports are
released after it, and a data plane that cannot hold is re-exported as before. At a start the
hold spans recovery and every try, so a volume whose LV shows only at a later try is linked with
the others, not after the port listens."""

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


def test_a_start_holds_the_ports_through_recovery_and_every_try(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nodeos.node.service.STARTUP_RECONCILE_PAUSE_S", 0.0)
    ops = Recorder()
    node = _node(SimpleNamespace(hold_listeners=None), ops, missing_tries=2)
    asyncio.run(NodeService._startup_reexport(node))
    assert ops.calls == [
        "hold_listeners",
        "recover",
        "reconcile",
        "reconcile",
        "reconcile",
        "release_listeners",
    ], "the volume missing at the first two tries is linked with the others, at the one release"
