"""The leader's loop bounds the waits that would otherwise hold an upgrade for good: a primary
that cannot move and a node that does not come back stop it, naming what it waited for; a
resync is not bounded (it takes as long as its data); a new leader gives a step its whole bound."""

from __future__ import annotations

import pytest

from nodeos.update import rolling, upgrade_loop
from nodeos.update.upgrade_loop import UpgradeLoop


def test_a_step_waiting_past_its_bound_stops_the_upgrade(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(upgrade_loop.time, "monotonic", lambda: now[0])
    loop = UpgradeLoop(cluster=None, local_status=None)
    wait = rolling.Act("wait", reason="rack=a: primaries to hand over: ckpt")
    up = {"id": "u1", "at": 0, "step": "handover"}
    assert loop._bounded(up, wait) is wait
    now[0] += upgrade_loop.STEP_BOUNDS_S["handover"] - 1
    assert loop._bounded(up, wait) is wait
    now[0] += 2
    stop = loop._bounded(up, wait)
    assert stop.kind == "stop" and stop.reason == "rack=a: primaries to hand over: ckpt for 600 s"
    # The next step (or another leader's view of it) starts its own count.
    up = {"id": "u1", "at": 0, "step": "rejoin"}
    assert loop._bounded(up, wait) is wait
    assert UpgradeLoop(cluster=None, local_status=None)._bounded(up, wait) is wait
    assert "sync" not in upgrade_loop.STEP_BOUNDS_S
