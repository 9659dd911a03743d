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


def test_leadership_goes_to_a_live_voter_outside_the_domain() -> None:
    """The leader is next to be updated: it hands leadership to a voter of another domain that
    answers, the most caught up; never to a dead voter (that transfer would never finish)."""
    from types import SimpleNamespace

    from nodeos.cluster.raft import ConfState, ProgressState
    from nodeos.cluster.raft.types import ProgressStatus

    def pr(match: int, active: bool) -> ProgressStatus:
        return ProgressStatus(match, match + 1, ProgressState.REPLICATE, active, False, 0)

    sent: list[int] = []
    progress = {1: pr(90, False), 2: pr(100, True), 3: pr(80, True), 4: pr(99, True), 5: pr(100, True)}
    d = SimpleNamespace(
        id=2,
        conf_state=ConfState(voters=(1, 2, 3, 4), learners=(5,)),
        node=SimpleNamespace(status=lambda: SimpleNamespace(progress=progress)),
        transfer_leadership=sent.append,
    )
    up = {"id": "u1", "at": 0, "domains": [{"name": "rack=b", "nodes": [2]}]}
    UpgradeLoop(cluster=None, local_status=None)._transfer(d, up)
    assert sent == [4]  # not 1 (silent), not 5 (a learner), not 3 (further behind)
    progress[4] = pr(99, False)
    progress[3] = pr(80, False)
    UpgradeLoop(cluster=None, local_status=None)._transfer(d, up)
    assert sent == [4]  # nobody to hand it to: it stays, and says so in the log


def test_kept_bundles_are_tidied_but_never_a_fresh_one_nor_during_a_job(tmp_path: object) -> None:
    """A node keeps the cluster's bundle (hundreds of MiB on a small state partition) only while
    an upgrade may need it; a copy just kept (its upgrade's start not in the map yet) and the one
    a job copies or installs stay."""
    import os
    import time
    from pathlib import Path

    from nodeos.update.node_job import KEEP_FRESH_S, NodeJob, bundle_path

    state = Path(str(tmp_path))
    old, fresh = bundle_path(state, "a" * 64), bundle_path(state, "b" * 64)
    old.parent.mkdir(parents=True)
    old.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(old, (time.time() - KEEP_FRESH_S - 1,) * 2)
    job = NodeJob(state, request=None, keyring=None)
    job.phase = "copying"
    assert job.forget_bundles() == [] and old.exists()
    job.phase = "idle"
    assert job.forget_bundles() == [old.name]
    assert not old.exists() and fresh.exists()


def test_at_feature_level_6_the_loop_proposes_upgrade_step_v2_with_its_release() -> None:
    """Only once every member knows level 6 does the leader propose `upgrade_step` v2 (the
    `release` step, and the update's own step records): a 0.5.0 member would stop at it."""
    import asyncio
    from types import SimpleNamespace
    from typing import Any

    from nodeos.cluster.map import decode_command

    from .test_rolling import World

    for level, want in ((6, (2, "release")), (5, (1, "update"))):
        w = World(level=level)
        w.start()
        while rolling.decide(w.st, w.leader, w.seen()).kind != "step":
            w.step()  # the hand-over: the failover loop's planned moves, the agents' reports
        proposed: list[dict[str, Any]] = []

        async def propose(data: bytes, timeout: float, into: list[Any] = proposed) -> None:
            into.append(decode_command(data))

        async def request(nid: int, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
            return {"boot_id": "b-1"}

        d = SimpleNamespace(map=SimpleNamespace(state=w.st), id=w.leader, propose=propose)
        loop = UpgradeLoop(
            cluster=SimpleNamespace(transport=SimpleNamespace(request=request)), local_status=None
        )
        asyncio.run(loop.tick(d, w.st["upgrade"]))
        asyncio.run(loop._send(d, w.st["upgrade"], 1))
        assert [(p["cmd"], p["v"]) for p in proposed] == [("upgrade_step", want[0])] * 2
        assert proposed[0]["args"]["to_step"] == want[1] and proposed[1]["args"]["sent"] == {1: "b-1"}
    assert upgrade_loop.STEP_BOUNDS_S["release"] == 300.0  # a primary that never cuts: stopped, named
