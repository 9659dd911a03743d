"""The leader's side of the lease floor (nodeos/control/failover_loop.py, issue 29): a new leader
asks the voters when they last acknowledged an older leader and counts leases from a majority's
moment; a voter still behind the new term, or silent, does not count."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from nodeos.agent import urgency
from nodeos.cluster.errors import PeerUnreachable
from nodeos.cluster.raft import ConfState, StateRole
from nodeos.control.failover_loop import FailoverLoop
from nodeos.storage.failover import LeaseTiming


class Transport:
    def __init__(self, answers: dict[int, Any]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    async def request(self, to: int, method: str, params: dict[str, Any], timeout: float) -> Any:
        assert method == "lease.contact" and params == {"term": 7}
        self.asked.append(to)
        ans = self.answers[to]
        if isinstance(ans, Exception):
            raise ans
        return {"ago_s": ans}


def _loop(answers: dict[int, Any], own_ago: float | None) -> tuple[FailoverLoop, Any]:
    voters = ConfState(voters=(1, 2, 3))
    d = SimpleNamespace(id=1, term=7, role=StateRole.LEADER, conf_state=voters, contact_ago=lambda t: own_ago)
    cluster = SimpleNamespace(driver=d, transport=Transport(answers), leader_handlers={}, peer_handlers={})
    return FailoverLoop(cluster, LeaseTiming(2.0)), d


def test_a_new_leader_counts_leases_from_the_earliest_majoritys_last_contact() -> None:
    async def run() -> None:
        loop, d = _loop({2: 0.5, 3: PeerUnreachable("dead")}, own_ago=1.5)
        leases = loop._leading(d)
        assert leases is not None and leases.floor is None
        assert loop._floor is not None
        await asyncio.wait_for(loop._floor, 2)
        # self 1.5 s ago, node 2 0.5 s ago, node 3 silent: the majority {1, 2} says 0.5 s ago
        assert 0.4 < time.monotonic() - leases.start() < 0.7

    asyncio.run(run())


def test_a_voter_behind_the_new_term_is_asked_again_and_nothing_counts_before_a_majority() -> None:
    async def run() -> None:
        loop, d = _loop({2: None, 3: PeerUnreachable("dead")}, own_ago=1.0)
        leases = loop._leading(d)
        await asyncio.sleep(0.3)
        assert leases is not None and leases.floor is None  # only itself answered
        assert loop.cluster.transport.asked.count(2) >= 2
        loop.cluster.transport.answers[2] = 2.0
        await asyncio.wait_for(loop._floor, 2)
        # The later of its own (1.0 s before the first ask) and node 2's (2.0 s before its answer,
        # 0.3 s after the first ask): 1.3 s ago.
        assert 1.2 < time.monotonic() - leases.start() < 1.5
        await loop.stop()

    asyncio.run(run())


def test_a_move_of_a_primary_on_this_node_is_followed_at_once() -> None:
    vol = {"replicas": 2, "placement": [{"node": 1}, {"node": 2}], "primary": 1, "epoch": 3}
    st = {"volumes": {"u": vol, "w": {**vol, "placement": [{"node": 2}, {"node": 3}]}}}
    before = urgency.roles(st, 1)
    assert before == urgency.roles(st, 1)
    vol["handoff"] = {"epoch": 3, "to": 2}
    assert urgency.roles(st, 1) != before
    st["volumes"]["w"]["epoch"] = 9  # not placed here: nothing to follow
    assert urgency.roles(st, 3) != urgency.roles({"volumes": {}}, 3)
    assert urgency.roles(st, 1) == urgency.roles({"volumes": {"u": vol}}, 1)


def test_a_follower_waits_for_leadership_instead_of_ticking_and_decides_as_soon_as_it_leads() -> None:
    """Only a leader decides: a follower's loop sleeps on the leader change (an idle storage VM
    spent a third of its emulated core on wake-ups like these), and starts ticking at once when
    it becomes the leader, not up to a second later."""

    async def run() -> None:
        loop, d = _loop({}, own_ago=None)
        d.role, d.leader_changed = StateRole.FOLLOWER, asyncio.Event()
        ticks: list[float] = []

        async def tick() -> None:
            ticks.append(time.monotonic())

        loop.tick = tick  # type: ignore[method-assign]
        task = asyncio.create_task(loop._run())
        await asyncio.sleep(0.5)
        assert ticks == []  # five ticks' time as a follower: none
        d.role = StateRole.LEADER
        led_at = time.monotonic()
        d.leader_changed.set()
        await asyncio.sleep(0.35)
        task.cancel()
        assert ticks and ticks[0] - led_at < 0.2, [t - led_at for t in ticks]
        assert len(ticks) >= 2  # then every tick

    asyncio.run(run())
