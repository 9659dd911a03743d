"""One-step snapshots of replicated volumes (nodeos/agent/onestep.py): the pure decisions, and the
shell's order of calls against a fake data plane and fake peers (freeze, every leg, thaw)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from nodeos.agent import onestep
from nodeos.agent.freeze import FREEZE_ABORT_S
from nodeos.agent.onestep import OneStep, Outcome, leg_wanted, mirror_whole, out_of_sync, outcome
from nodeos.cluster.errors import PeerUnreachable
from nodeos.dataplane.base import MirrorInfo, MirrorMember
from nodeos.errors import BadInput, NodeosError, NotFound, OperationFailed


def _st(phase: str | None = "freezing", states: dict[int, str] | None = None) -> dict[str, Any]:
    states = states or {1: "in-sync", 2: "in-sync"}
    placement = [{"node": 1, "pool_id": "p1"}, {"node": 2, "pool_id": "p2"}]
    vol = {"uuid": "u-v", "name": "v", "primary": 1, "epoch": 3, "placement": placement, "freeze": "s-1"}
    snap = {
        "uuid": "s-1", "name": "s", "snap_id": "ss1", "volume": "u-v", "volume_name": "v",
        "size_bytes": 1 << 20, "placement": placement, "primary": 1, "epoch": 3,
        "state": "creating", "phase": phase, "created": 7,
    }  # fmt: skip
    reports = {
        n: {"replicas": {"u-v": {"state": s, **({"members": {2: states[2]}} if n == 1 else {})}}}
        for n, s in states.items()
    }
    return {"volumes": {"u-v": vol}, "snapshots": {"s-1": snap}, "reports": reports, "kv": {}}


def _mirror(*states: str, degraded: bool = False) -> MirrorInfo:
    members = tuple(MirrorMember(i, f"d{i}", s) for i, s in enumerate(states))  # type: ignore[arg-type]
    return MirrorInfo("nodeos-x", "/dev/md/x", 1 << 20, degraded, members, "active", "idle")


# ---- pure -------------------------------------------------------------------------------
def test_the_one_step_is_the_default_and_the_passes_are_asked_for_through_the_key_value_store() -> None:
    st = _st()
    assert onestep.enabled(st)  # the default since the kernel data plane's lab test passed
    st["kv"][onestep.KNOB] = {"value": "passes", "revision": 1}
    assert not onestep.enabled(st)
    st["kv"][onestep.KNOB] = {"value": "one-step", "revision": 2}
    assert onestep.enabled(st)


def test_a_leg_the_map_does_not_count_in_sync_stops_it() -> None:
    assert out_of_sync(_st(), _st()["volumes"]["u-v"]) == []
    st = _st(states={1: "degraded", 2: "syncing"})
    assert out_of_sync(st, st["volumes"]["u-v"]) == [2]


def test_the_mirror_read_in_the_hold_must_have_every_leg_in_sync() -> None:
    assert mirror_whole(_mirror("in_sync", "in_sync"), 2) is None
    assert "1 of 2" in str(mirror_whole(_mirror("in_sync", "faulty"), 2))
    assert "1 of 2" in str(mirror_whole(_mirror("in_sync", "rebuilding"), 2))
    assert mirror_whole(_mirror("in_sync", "in_sync", degraded=True), 2) is not None
    assert mirror_whole(_mirror("in_sync"), 2) is not None  # a leg dropped from the raid
    assert mirror_whole(None, 2) == "the mirror is not assembled"


def test_a_replica_takes_its_leg_only_for_the_primary_at_the_epoch_it_knows() -> None:
    st = _st()
    assert leg_wanted(st, 2, 1, {"snap": "s-1", "epoch": 3})["uuid"] == "s-1"
    with pytest.raises(OperationFailed):
        leg_wanted(st, 2, 1, {"snap": "s-1", "epoch": 2})  # a stale primary
    with pytest.raises(OperationFailed):
        leg_wanted(st, 2, 3, {"snap": "s-1", "epoch": 3})  # not the primary
    with pytest.raises(NotFound):
        leg_wanted(st, 3, 1, {"snap": "s-1", "epoch": 3})  # no leg here
    with pytest.raises(NotFound):
        leg_wanted(_st(phase="taking"), 2, 1, {"snap": "s-1", "epoch": 3})  # the passes' phase
    with pytest.raises(NotFound):
        leg_wanted(st, 2, 1, {"snap": "s-9", "epoch": 3})


def test_any_failure_fails_it_and_an_older_replica_hands_it_to_the_passes() -> None:
    assert outcome(None, None, {2: None}).kind == "taken"
    assert outcome(OperationFailed("lvol"), None, {2: None}).kind == "failed"
    assert outcome(None, "the mirror has 1 of 2 legs in sync", {2: None}).kind == "failed"
    out = outcome(None, None, {2: PeerUnreachable("no answer within 2.0 s")})
    assert out.kind == "failed" and "node 2's leg: no answer" in out.reason
    old = BadInput("unknown peer method 'snapshot.leg'", field="method")
    assert outcome(None, None, {2: old}).kind == "passes"
    assert outcome(None, None, {2: old, 3: PeerUnreachable("x")}).kind == "failed"


# ---- shell ------------------------------------------------------------------------------
class FakeOps:
    def __init__(self, log: list[str], mirror: MirrorInfo | None, fail: set[str]) -> None:
        self.log, self.mirror, self.fail = log, mirror, fail

    async def call(self, method: str, *args: Any) -> Any:
        self.log.append(method)
        await asyncio.sleep(0)
        if method in self.fail:
            raise OperationFailed(f"{method} failed")
        return self.mirror if method == "read_and_thaw_mirror" else None

    def begin_op(self, op: str, data: dict[str, Any], prepare: Any) -> None:
        self.log.append(f"{op} prepared local")  # the intent's commit

    async def abandon_op(self, op: str, data: dict[str, Any], why: str) -> None:
        self.log.append(f"{op} given up local")

    async def run_until_made(
        self, op: str, data: dict[str, Any], prepare: Any, commit_after: Any = None
    ) -> asyncio.Task[None]:
        assert prepare is None  # begun before the hold: no commit inside it
        self.log.append(f"{op} local")
        await asyncio.sleep(0.01)
        if "local" in self.fail:
            raise OperationFailed("lvol snapshot failed")

        async def record() -> None:  # the final commit, after the answer and what it waits for
            await (commit_after if commit_after is not None else asyncio.sleep(0))
            await asyncio.sleep(0.01)
            if "local record" in self.fail:
                raise OperationFailed("LMDB commit failed")
            self.log.append(f"{op} local recorded")

        return asyncio.ensure_future(record())


class FakeTransport:
    def __init__(self, log: list[str], answers: dict[str, Any]) -> None:
        self.log, self.answers = log, answers
        self.timeouts: dict[tuple[str, int], float] = {}

    async def request(self, to: int, method: str, params: dict[str, Any], timeout: float) -> Any:
        self.log.append(f"{method} {to}")
        self.timeouts[(method, to)] = timeout
        ans = self.answers.get(method)
        if isinstance(ans, float):
            await asyncio.sleep(ans)  # a slow leg
            self.log.append(f"{method} {to} answered")
            return {}
        if isinstance(ans, NodeosError):
            raise ans
        return {}


def _agent(st: dict[str, Any], log: list[str], answers: dict[str, Any] | None = None, **kw: Any) -> Any:
    driver = SimpleNamespace(map=SimpleNamespace(state=st), id=1)
    node = SimpleNamespace(
        ops=FakeOps(log, kw.get("mirror", _mirror("in_sync", "in_sync")), kw.get("fail", set())),
        records=lambda: (
            {},
            {"v": {"name": "v", "state": "ready", "pool": "p", "pool_id": "p1", "vol_id": "v1"}},
            {},
        ),
    )
    cluster = SimpleNamespace(transport=FakeTransport(log, answers or {}), peer_handlers={})
    return SimpleNamespace(
        node=node, cluster=cluster, errors={}, legwatch=SimpleNamespace(held={}), _driver=lambda: driver
    )


def _take(agent: Any, st: dict[str, Any]) -> Outcome:
    return asyncio.run(OneStep(agent).take(st, 1, "u-v", "s-1", "nodeos-x"))


def test_every_leg_is_taken_between_the_freeze_and_the_thaw() -> None:
    st, log = _st(), []
    out = _take(_agent(st, log, {"snapshot.leg": 0.05}), st)
    assert out.kind == "taken" and not out.frozen, out
    assert log[0] == "snapshot.ready 2"  # the replica's map caught up before the hold
    freeze, thaw = log.index("freeze_mirror_writes"), log.index("read_and_thaw_mirror")
    assert log.index("prepare_mirror_freeze") == freeze - 1  # the freeze's reads, before the hold
    assert log.index("volume.snapshot prepared local") < freeze  # the intent's commit too
    for part in ("volume.snapshot local", "snapshot.leg 2", "snapshot.leg 2 answered"):
        assert freeze < log.index(part) < thaw, log  # the slowest leg answered before the thaw
    assert out.held_s > 0.04 and set(out.parts) == {"freeze", "legs", "thaw"}
    assert log.index("snapshot.leg 2") < log.index("volume.snapshot local")  # asked before our intent
    assert set(out.legs_s) == {"here", "node 2"}  # when each leg answered: where the hold went
    assert out.legs_s["node 2"] >= 0.05 > out.legs_s["here"]  # the replica's leg took 50 ms here
    # every leg's record committed after the thaw (not held), and known before the outcome
    assert thaw < log.index("volume.snapshot local recorded") and thaw < log.index("snapshot.settled 2")
    assert out.settled_s >= 0.01


@pytest.mark.parametrize(
    "answers, kw, why",
    [
        ({"snapshot.settled": OperationFailed("no record: undone by a restart?")}, {}, "node 2's leg record"),
        ({"snapshot.settled": PeerUnreachable("no answer within 6.0 s")}, {}, "node 2's leg record"),
        ({}, {"fail": {"local record"}}, "this node's leg record"),
    ],
)
def test_a_leg_whose_record_is_not_committed_fails_the_snapshot(answers: Any, kw: Any, why: str) -> None:
    """A leg answered once made, its record committed after the thaw: a record that is not there
    (a replica restarted in between undid its leg) fails the snapshot; the writes flow."""
    st, log = _st(), []
    out = _take(_agent(st, log, answers, **kw), st)
    assert out.kind == "failed" and why in out.reason and not out.frozen, out
    assert log.index("read_and_thaw_mirror") < log.index("snapshot.settled 2")


def test_a_replica_of_an_older_release_answered_its_leg_recorded() -> None:
    st, log = _st(), []
    old = BadInput("unknown peer method 'snapshot.settled'", field="method")
    out = _take(_agent(st, log, {"snapshot.settled": old}), st)
    assert out.kind == "taken", out


@pytest.mark.parametrize(
    "dataplane, bound",
    [
        ("spdk", onestep.LEG_TIMEOUT_S),
        ("kernel", onestep.LVM_LEG_TIMEOUT_S),
        (None, onestep.LVM_LEG_TIMEOUT_S),
    ],
)
def test_a_replica_leg_is_waited_for_as_long_as_its_data_plane_takes(
    dataplane: str | None, bound: float
) -> None:
    """An SPDK leg is an RPC (2 s bound); a kernel one an lvcreate, which a 2 s bound failed in the
    lab: it gets the bound the phases of passes hold writes for. Unknown: the longer."""
    st, log = _st(), []
    if dataplane is not None:
        st["reports"][2]["dataplane"] = {"name": dataplane}
    agent = _agent(st, log)
    out = _take(agent, st)
    assert out.kind == "taken", out
    assert agent.cluster.transport.timeouts[("snapshot.leg", 2)] == bound
    assert onestep.LEG_TIMEOUT_S < onestep.LVM_LEG_TIMEOUT_S <= FREEZE_ABORT_S


@pytest.mark.parametrize(
    "answers, kw, why",
    [
        ({"snapshot.leg": PeerUnreachable("no answer within 2.0 s")}, {}, "node 2's leg"),
        ({}, {"fail": {"local"}}, "this node's leg"),
        ({}, {"mirror": _mirror("in_sync", "faulty")}, "1 of 2 legs"),
        ({}, {"fail": {"read_and_thaw_mirror"}}, "state unknown"),
    ],
)
def test_any_failure_in_the_hold_lets_the_writes_go_and_fails_it(answers: Any, kw: Any, why: str) -> None:
    st, log = _st(), []
    out = _take(_agent(st, log, answers, **kw), st)
    assert out.kind == "failed" and why in out.reason and not out.frozen, out
    # the mirror read and the thaw after every leg answered; when that failed, a thaw again
    want = "thaw_mirror_writes" if "read_and_thaw_mirror" in kw.get("fail", ()) else "read_and_thaw_mirror"
    assert log[-1] == want and log.count("freeze_mirror_writes") == 1, log


def test_nothing_is_held_when_a_replica_is_not_ready_or_behind() -> None:
    st, log = _st(), []
    out = _take(_agent(st, log, {"snapshot.ready": PeerUnreachable("no answer")}), st)
    assert out.kind == "failed" and "freeze_mirror_writes" not in log
    st, log = _st(states={1: "degraded", 2: "syncing"}), []
    out = _take(_agent(st, log), st)
    assert out.kind == "failed" and "not in sync" in out.reason and log == []


def test_a_leg_taken_before_a_restart_is_not_mixed_with_new_ones() -> None:
    st, log = _st(), []
    agent = _agent(st, log)
    agent.node.records = lambda: ({}, {}, {"s": {"name": "s", "uuid": "s-1", "state": "ready"}})
    out = _take(agent, st)
    assert out.kind == "failed" and "taken before" in out.reason and log == []


def test_a_replica_of_an_older_release_hands_it_to_the_passes_with_nothing_held() -> None:
    st, log = _st(), []
    old = BadInput("unknown peer method 'snapshot.ready'", field="method")
    out = _take(_agent(st, log, {"snapshot.ready": old}), st)
    assert out.kind == "passes" and not out.frozen and "freeze_mirror_writes" not in log


def test_a_thaw_that_fails_leaves_the_writes_held_for_the_freezer() -> None:
    st, log = _st(), []
    out = _take(_agent(st, log, fail={"read_and_thaw_mirror", "thaw_mirror_writes"}), st)
    assert out.kind == "failed" and out.frozen and "state unknown" in out.reason, out
    st, log = _st(), []  # the read and thaw failed, the thaw again did not: nothing held
    out = _take(_agent(st, log, fail={"read_and_thaw_mirror"}), st)
    assert out.kind == "failed" and not out.frozen and log[-1] == "thaw_mirror_writes", out


class ReplicaOps:
    """A replica node's leg: made at once, its record committed 20 ms later (or never: lost)."""

    def __init__(self, snaps: dict[str, Any], lost: bool) -> None:
        self.snaps, self.lost = snaps, lost

    def begin_op(self, op: str, data: dict[str, Any], prepare: Any) -> None:
        self.snaps["s"] = {"name": "s", "uuid": "s-1", "state": "creating"}  # the intent's record

    async def abandon_op(self, op: str, data: dict[str, Any], why: str) -> None:
        del self.snaps["s"]

    async def run_until_made(
        self, op: str, data: dict[str, Any], prepare: Any, commit_after: Any = None
    ) -> asyncio.Task[None]:
        assert prepare is None and self.snaps["s"]["state"] == "creating"  # prepared at ready

        async def record() -> None:
            await asyncio.sleep(0.02)
            if self.lost:  # the daemon restarted here: recovery undid the leg
                del self.snaps["s"]
                return
            self.snaps["s"]["state"] = "ready"

        return asyncio.ensure_future(record())


def _replica(lost: bool) -> tuple[OneStep, dict[str, Any]]:
    """Node 2's one step, its ready replica of v, and its snapshot records (filled by ReplicaOps)."""
    st, snaps = _st(), {}
    driver = SimpleNamespace(map=SimpleNamespace(state=st), id=2)
    volume = {"name": "v", "state": "ready", "pool": "p", "pool_id": "p2", "vol_id": "v2"}
    node = SimpleNamespace(ops=ReplicaOps(snaps, lost), records=lambda: ({}, {"v": volume}, snaps))
    agent = SimpleNamespace(node=node, cluster=SimpleNamespace(peer_handlers={}), _driver=lambda: driver)
    return OneStep(agent), snaps


@pytest.mark.parametrize("lost", [False, True])
def test_a_replica_answers_its_leg_made_and_vouches_for_its_record_when_asked(lost: bool) -> None:
    step, snaps = _replica(lost)
    params = {"snap": "s-1", "epoch": 3}

    async def go() -> None:
        assert (await step.serve(1, "snapshot.ready", params))["ready"] and "s" in snaps  # prepared
        ans = await step.serve(1, "snapshot.leg", params)
        assert ans["state"] == "taken" and snaps["s"]["state"] == "creating"  # answered before its record
        if not lost:
            assert (await step.serve(1, "snapshot.settled", params))["state"] == "ready"
            return
        with pytest.raises(OperationFailed, match="not recorded"):
            await step.serve(1, "snapshot.settled", params)

    asyncio.run(go())


def test_legs_prepared_for_a_hold_that_does_not_begin_are_released() -> None:
    st, log = _st(), []  # a replica not ready: the others (here node 2's leg) may have prepared
    st["snapshots"]["s-1"]["placement"].append({"node": 3, "pool_id": "p3"})
    st["reports"][3] = {"replicas": {"u-v": {"state": "in-sync"}}}
    st["reports"][1]["replicas"]["u-v"]["members"][3] = "in-sync"
    agent = _agent(st, log, {"snapshot.ready": PeerUnreachable("no answer")})
    out = _take(agent, st)
    assert out.kind == "failed" and "freeze_mirror_writes" not in log, out
    assert {"snapshot.release 2", "snapshot.release 3"} <= set(log)
    st, log = _st(), []  # the freeze fails: this node's prepared leg is given up, the others released
    agent = _agent(st, log, fail={"freeze_mirror_writes"})
    with pytest.raises(OperationFailed):
        asyncio.run(_give_up_after(OneStep(agent), st))
    assert "volume.snapshot given up local" in log and "snapshot.release 2" in log, log


async def _give_up_after(step: OneStep, st: dict[str, Any]) -> None:
    try:
        await step.take(st, 1, "u-v", "s-1", "nodeos-x")
    finally:
        await asyncio.gather(*step._giving_up)


def test_a_replica_gives_up_a_prepared_leg_no_hold_came_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onestep, "PREPARED_KEPT_S", 0.05)
    step, snaps = _replica(False)
    params = {"snap": "s-1", "epoch": 3}

    async def go() -> None:
        await step.serve(1, "snapshot.ready", params)
        assert "s" in snaps
        await asyncio.sleep(0.1)
        assert snaps == {} and step.prepared == {}  # undone: no leg half there for the passes
        await step.serve(1, "snapshot.ready", params)
        with pytest.raises(OperationFailed, match="not the primary"):
            await step.serve(3, "snapshot.release", params)
        assert (await step.serve(1, "snapshot.release", params))["released"]
        await asyncio.sleep(0)
        assert snaps == {}

    asyncio.run(go())
