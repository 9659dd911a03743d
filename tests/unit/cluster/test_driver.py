"""The Raft driver with real parts in one process: LMDB raft storage, loopback transports.

The storage and transport are the real ones, observed (not replaced) so the test can check
the order Raft requires: nothing is sent before what it promises is on disk (a leader's own
appends may leave before its write: they promise nothing about its disk).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.driver import RaftDriver
from nodeos.cluster.errors import NotLeader
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.raft import Message, MessageType, ProgressState, StateRole, bootstrap_storage, from_wire
from nodeos.cluster.raft_storage import LmdbRaftStorage
from nodeos.cluster.transport import PeerTransport

pytestmark = pytest.mark.timeout(120)
SECRET = b"d" * 32


class ObservedStorage:
    """The real LMDB storage; remembers what was durably persisted, for the ordering check."""

    def __init__(self, inner: LmdbRaftStorage) -> None:
        self.inner = inner
        self.durable_term = 0
        self.durable_vote = 0

        self.durable_last = inner.last_index()

    def install(self, view: Any) -> None:
        # The driver installs a write's view only once the write is synced.
        self.inner.install(view)
        if view.hard_state is not None:
            self.durable_term, self.durable_vote = view.hard_state.term, view.hard_state.vote
        self.durable_last = view.last

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Member:
    def __init__(self, tmp: Path, nid: int, voters: list[int]) -> None:
        self.nid = nid
        raw = LmdbRaftStorage.open(tmp / f"raft{nid}")
        bootstrap_storage(raw, voters)
        self.storage = ObservedStorage(raw)
        self.violations: list[str] = []
        self.votes_granted = 0
        self.sent: list[Message] = []
        self.transport = PeerTransport(nid, "c", SECRET, self._on_raft, self._on_request)
        self.driver: RaftDriver[ClusterMap] | None = None

    def _on_raft(self, frm: int, msg: dict[str, Any]) -> None:
        if self.driver is not None:
            self.driver.on_raft(frm, msg)

    async def _on_request(self, frm: int, method: str, params: dict[str, Any]) -> Any:
        return None

    def watch_sends(self) -> None:
        real = self.transport.send_raft

        def send(to: int, wire: dict[str, Any]) -> bool:
            m = from_wire(wire)
            self.sent.append(m)
            st = self.storage
            # Pre-vote messages carry a term that is deliberately not adopted (nor persisted).
            prevote = m.type in (MessageType.PRE_VOTE, MessageType.PRE_VOTE_RESP)
            if m.type is MessageType.VOTE_RESP and not m.reject:
                # A granted vote is a promise: the (term, vote) it makes must be on disk first,
                # or a crash lets this node vote twice in one term.
                self.votes_granted += 1
                if (st.durable_term, st.durable_vote) != (m.term, m.to):
                    self.violations.append(
                        f"granted a vote to {m.to} in term {m.term} before persisting it "
                        f"(on disk: term {st.durable_term}, vote {st.durable_vote})"
                    )
            if m.term > st.durable_term and not prevote:
                self.violations.append(
                    f"sent {m.type.name} term {m.term} before persisting it ({st.durable_term})"
                )
            # A leader may send its entries before they are on its own disk (followers write
            # them meanwhile); an ack must not promise entries this node has not synced.
            if m.type is MessageType.APP_RESP and not m.reject and m.index > st.durable_last:
                self.violations.append(f"acked entry {m.index} before persisting it ({st.durable_last})")
            return real(to, wire)

        self.transport.send_raft = send  # type: ignore[method-assign]


async def make_cluster(tmp: Path, n: int = 3) -> list[Member]:
    ids = list(range(1, n + 1))
    members = [Member(tmp, i, ids) for i in ids]
    for m in members:
        await m.transport.listen("127.0.0.1", 0)
    for m in members:
        m.watch_sends()
        m.driver = RaftDriver(
            m.nid,
            m.storage,
            m.transport,  # type: ignore[arg-type]
            state_machine=ClusterMap(),
            tick_s=0.02,
            election_tick=10,
        )
        for other in members:
            if other is not m:
                m.transport.set_peer(other.nid, other.transport.advertise)
        m.driver.start()
    return members


async def leader_of(members: list[Member], timeout: float = 20.0) -> Member:
    async def poll() -> Member:
        while True:
            for m in members:
                if m.driver is not None and m.driver.role is StateRole.LEADER:
                    return m
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(poll(), timeout)


async def shutdown(members: list[Member]) -> None:
    for m in members:
        if m.driver is not None:
            await m.driver.stop()
        await m.transport.close()
        m.storage.inner.close()


def with_leader(tmp: Path, body: Callable[[list[Member], Member, RaftDriver], Awaitable[None]]) -> None:
    """Run `body(members, leader, its driver)` on a fresh 3-node cluster whose leader has
    confirmed its leadership once; the cluster is shut down whatever happens."""

    async def main() -> None:
        members = await make_cluster(tmp)
        try:
            leader = await leader_of(members)
            assert leader.driver is not None
            await leader.driver.read_barrier()
            await body(members, leader, leader.driver)
        finally:
            await shutdown(members)

    asyncio.run(main())


def test_commands_commit_everywhere_and_nothing_is_sent_before_it_is_durable(tmp_path: Path) -> None:
    async def main() -> None:
        members = await make_cluster(tmp_path)
        try:
            leader = await leader_of(members)
            assert leader.driver is not None
            for i in range(30):
                out = await leader.driver.propose(encode_command("kv_put", {"key": f"k{i % 3}", "value": i}))
                assert out["value"] == i
            await leader.driver.read_barrier()
            assert leader.driver.map.kv_get("k2") == 29

            async def converged() -> None:
                while any(m.driver is not None and m.driver.map.kv_get("k2") != 29 for m in members):
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(converged(), 20)
            snaps = {m.driver.map.snapshot() for m in members if m.driver is not None}
            assert len(snaps) == 1  # identical maps everywhere
            follower = next(m for m in members if m is not leader)
            assert follower.driver is not None
            with pytest.raises(NotLeader):
                await follower.driver.propose(encode_command("kv_put", {"key": "x", "value": 1}))
            assert [v for m in members for v in m.violations] == []
            assert sum(m.votes_granted for m in members) >= 1  # the vote check did run
        finally:
            await shutdown(members)

    asyncio.run(main())


def test_proposals_made_together_travel_as_one_append_and_each_gets_its_own_result(tmp_path: Path) -> None:
    """Eight clients' requests read in one poll: one append per follower carries all eight
    (group commit), yet each proposer gets its own entry's result; a batch Raft refuses fails
    every proposal in it with NotLeader."""

    async def body(members: list[Member], leader: Member, d: RaftDriver) -> None:
        # Both followers replicating (a follower still probing after the election, as on a busy
        # host, takes one append at a time until it answers: not what this test is about).
        progress = d.node.raft.trk.progress
        while any(pr.state is not ProgressState.REPLICATE for nid, pr in progress.items() if nid != d.id):
            await asyncio.sleep(0.01)
        leader.sent.clear()
        cmds = [encode_command("kv_cas", {"key": "c", "expect": i or None, "value": i + 1}) for i in range(8)]
        outs = await asyncio.gather(*(d.propose(c) for c in cmds))
        # In order, each its own result: the i-th compare-and-set saw the (i-1)-th's value.
        assert [o["value"] for o in outs] == list(range(1, 9))
        carried = [len(m.entries) for m in leader.sent if m.type is MessageType.APP and m.entries]
        assert carried and max(carried) == 8, carried
        assert len(carried) == 2, carried  # one per follower
        raft = d.node.raft
        raft.become_follower(raft.term, 0)  # Raft steps down before the driver sees it
        refused = await asyncio.gather(
            *(d.propose(encode_command("kv_put", {"key": "x", "value": i})) for i in range(3)),
            return_exceptions=True,
        )
        assert all(isinstance(r, NotLeader) for r in refused), refused
        assert d._waiters.proposals == {}
        assert [v for m in members for v in m.violations] == []

    with_leader(tmp_path, body)


def test_map_changed_fires_on_every_node_for_a_map_change_but_not_for_the_key_value_store(
    tmp_path: Path,
) -> None:
    """What the agent and the API's waits wake on: a host added is seen by every member's event;
    a key-value put (the bench's and the tests' traffic) wakes no agent."""

    async def body(members: list[Member], leader: Member, d: RaftDriver) -> None:
        async def all_applied(index: int) -> None:
            while any(m.driver is not None and m.driver.map.applied_index < index for m in members):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(all_applied(d.map.applied_index), 10)  # the new term's no-op everywhere
        events = [m.driver.map_changed for m in members if m.driver is not None]
        await d.propose(encode_command("kv_put", {"key": "k", "value": 1}))
        await asyncio.wait_for(all_applied(d.map.applied_index), 10)  # the put applied everywhere
        assert not any(e.is_set() for e in events)
        nqn = "nqn.2014-08.com.example:h1"
        await d.propose(encode_command("host_add", {"nqn": nqn}))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 10)
        assert all(m.driver is not None and nqn in m.driver.map.state["hosts"] for m in members)

    with_leader(tmp_path, body)


def test_a_proposal_to_a_stopped_driver_says_not_leader_and_reaches_no_log(tmp_path: Path) -> None:
    async def body(members: list[Member], leader: Member, d: RaftDriver) -> None:
        last = d.node.raft.log.last_index()
        await d.stop()
        assert d.role is StateRole.LEADER  # as the service sees it until it drops the driver
        with pytest.raises(NotLeader, match="stopping"):
            await d.propose(encode_command("kv_put", {"key": "late", "value": 1}))
        assert d.node.raft.log.last_index() == last

    with_leader(tmp_path, body)


def test_a_read_barrier_on_a_leader_that_just_stepped_down_says_not_leader(tmp_path: Path) -> None:
    """Raft can step down in a tick before the driver has seen the Ready that says so (the
    failover simulator's seed 4684): the barrier must answer NotLeader, as a proposal does."""

    async def body(members: list[Member], leader: Member, d: RaftDriver) -> None:
        raft = d.node.raft
        raft.become_follower(raft.term, 0)  # what a check-quorum tick does, Ready not seen yet
        assert d.role is StateRole.LEADER
        with pytest.raises(NotLeader):
            await d.read_barrier()

    with_leader(tmp_path, body)


def test_a_new_leader_takes_over_and_keeps_committed_data(tmp_path: Path) -> None:
    async def main() -> None:
        members = await make_cluster(tmp_path)
        try:
            old = await leader_of(members)
            assert old.driver is not None
            await old.driver.propose(encode_command("kv_put", {"key": "a", "value": "before"}))
            await old.driver.stop()  # the old leader goes silent
            old.driver = None
            await old.transport.close()
            rest = [m for m in members if m is not old]
            new = await leader_of(rest)
            assert new.driver is not None and new is not old
            await new.driver.read_barrier()
            assert new.driver.map.kv_get("a") == "before"
            await new.driver.propose(encode_command("kv_put", {"key": "a", "value": "after"}))
            assert [v for m in members for v in m.violations] == []
        finally:
            await shutdown(members)

    asyncio.run(main())


def test_bad_raft_messages_from_a_peer_are_counted_and_ignored(tmp_path: Path) -> None:
    async def main() -> None:
        members = await make_cluster(tmp_path)
        try:
            leader = await leader_of(members)
            assert leader.driver is not None
            leader.driver.on_raft(2, {"type": 3, "to": leader.nid, "from": 2, "entries": "garbage"})
            leader.driver.on_raft(2, {"type": 0, "to": leader.nid, "from": 2})  # local-only type
            leader.driver.on_raft(2, {"type": 8, "to": leader.nid, "from": 3})  # spoofed sender
            assert leader.driver.bad_messages == 3
            out = await leader.driver.propose(encode_command("kv_put", {"key": "k", "value": 1}))
            assert out["value"] == 1
        finally:
            await shutdown(members)

    asyncio.run(main())


def test_a_node_whose_disk_fails_goes_silent_and_the_rest_go_on(tmp_path: Path) -> None:
    async def main() -> None:
        members = await make_cluster(tmp_path)
        try:
            leader = await leader_of(members)
            assert leader.driver is not None
            broken = next(m for m in members if m is not leader)
            assert broken.driver is not None
            broken.storage.inner.store.close()  # every later LMDB write fails for real

            async def dead() -> None:
                while broken.driver is not None and broken.driver.running:
                    await leader.driver.propose(encode_command("kv_put", {"key": "k", "value": 1}))  # type: ignore[union-attr]

            await asyncio.wait_for(dead(), 20)
            out = await leader.driver.propose(encode_command("kv_put", {"key": "k", "value": 2}))
            assert out["value"] == 2
            members.remove(broken)
            await broken.driver.stop()
            await broken.transport.close()
        finally:
            await shutdown(members)

    asyncio.run(main())


def test_events_carry_the_leaders_time_and_only_the_leader_journals_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import time

    from nodeos.cluster import events as map_events

    async def main() -> None:
        members = await make_cluster(tmp_path)
        try:
            leader = await leader_of(members)
            assert leader.driver is not None
            caplog.set_level(logging.INFO, logger="nodeosd.events")
            t0 = time.time()
            await leader.driver.propose(encode_command("add_node", {"node_id": 7, "name": "n7"}))
            t1 = time.time()

            async def converged() -> None:
                while any(m.driver is not None and 7 not in m.driver.map.nodes for m in members):
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(converged(), 20)
            logs = [map_events.list_events(m.driver.map.state) for m in members if m.driver is not None]
            assert all(x == logs[0] for x in logs) and [e["kind"] for e in logs[0]] == ["node_joined"]
            assert t0 <= logs[0][0]["at"] <= t1  # the proposer's clock, the same on every node
        finally:
            await shutdown(members)

    asyncio.run(main())
    journaled = [r for r in caplog.records if r.name == "nodeosd.events"]
    joined = "event node_joined: node 7 (n7) joined the cluster as storage"
    assert [r.getMessage() for r in journaled] == [joined]  # once, though three nodes applied it
    assert journaled[0].fields["event_kind"] == "node_joined"  # type: ignore[attr-defined]
