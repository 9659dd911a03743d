"""RawNode, the application's interface: input validation, Ready/advance contract, status."""

from __future__ import annotations

import pytest

from nodeos.cluster.raft import (
    Config,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    ProgressState,
    RawNode,
    StateRole,
    bootstrap_storage,
)

from .harness import Cluster


def test_peer_cannot_inject_local_message_types_or_misaddressed_messages() -> None:
    s = MemoryStorage()
    bootstrap_storage(s, [1, 2, 3])
    n = RawNode(Config(id=1), s)
    with pytest.raises(ValueError, match="local-only"):
        n.step(Message(MessageType.HUP, to=1, frm=2))
    with pytest.raises(ValueError, match="addressed to 2"):
        n.step(Message(MessageType.HEARTBEAT, to=2, frm=3, term=5))
    assert n.status().soft_state.role is StateRole.FOLLOWER


def test_bootstrap_refuses_existing_state_and_bad_voters() -> None:
    s = MemoryStorage()
    bootstrap_storage(s, [1, 2, 3])
    with pytest.raises(ValueError, match="not empty"):
        bootstrap_storage(s, [1])
    with pytest.raises(ValueError, match="voters"):
        bootstrap_storage(MemoryStorage(), [0])
    with pytest.raises(ValueError, match=r"config\.id"):
        RawNode(Config(id=0), MemoryStorage())
    with pytest.raises(ValueError, match="election_tick"):
        RawNode(Config(id=1, election_tick=1, heartbeat_tick=1), MemoryStorage())


def test_single_node_cluster_commits_only_what_is_on_its_disk() -> None:
    s = MemoryStorage()
    bootstrap_storage(s, [7])
    n = RawNode(Config(id=7), s)
    n.campaign()
    rd = n.ready()
    assert rd.hard_state == HardState(term=2, vote=7, commit=1)
    assert rd.must_sync and [e.index for e in rd.entries] == [2]
    # A quorum of one, but its copy is not synced yet: nothing commits before advance().
    assert rd.committed_entries == []
    s.persist(rd.hard_state, rd.entries, rd.snapshot)
    n.advance(rd)
    rd = n.ready()
    assert rd.hard_state == HardState(term=2, vote=7, commit=2)
    assert [e.index for e in rd.committed_entries] == [2]
    s.persist(rd.hard_state, rd.entries, rd.snapshot)
    n.advance(rd)
    n.propose(b"x")
    rd = n.ready()
    assert [e.data for e in rd.entries] == [b"x"] and rd.committed_entries == []
    s.persist(rd.hard_state, rd.entries, rd.snapshot)
    n.advance(rd)
    rd = n.ready()
    assert [e.data for e in rd.committed_entries] == [b"x"]
    s.persist(rd.hard_state, rd.entries, rd.snapshot)
    n.advance(rd)
    assert not n.has_ready()
    assert n.status().applied == 3


def test_status_reports_leader_progress_for_lag() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.isolate(3)
    for k in range(4):
        c.propose(1, b"k%d" % k)
    st = c.members[1].node.status()
    assert st.soft_state.leader == 1 and st.hard_state.term == c.raft(1).term
    last = c.raft(1).log.last_index()
    assert st.progress[2].match == last and st.progress[2].state is ProgressState.REPLICATE
    assert last - st.progress[3].match == 4  # the lag an operator sees for node 3
    assert c.members[2].node.status().progress == {}  # followers do not track peers


def test_single_voter_read_after_restart_waits_for_an_entry_of_its_term() -> None:
    # Found by the simulator (1 node, seed 18): "x" at index 3 was committed and acknowledged,
    # but the commit index on disk is written lazily, so after a crash it says 2. The
    # restarted leader must not answer a read at index 2: that read would miss "x".
    s = MemoryStorage()
    bootstrap_storage(s, [7])
    n = RawNode(Config(id=7), s)
    n.campaign()
    for _ in range(2):
        rd = n.ready()
        s.persist(rd.hard_state, rd.entries, rd.snapshot)
        n.advance(rd)
    n.propose(b"x")
    rd = n.ready()
    s.persist(rd.hard_state, rd.entries, rd.snapshot)  # "x" synced; its commit is not written
    n.advance(rd)
    assert n.ready().hard_state == HardState(term=2, vote=7, commit=3)  # acknowledged, then crash
    restarted = RawNode(Config(id=7), s)
    assert restarted.raft.log.committed == 2
    restarted.campaign()
    restarted.read_index(b"r")
    reads = []
    while restarted.has_ready():
        rd = restarted.ready()
        reads += rd.read_states
        s.persist(rd.hard_state, rd.entries, rd.snapshot)
        restarted.advance(rd)
    assert [(r.request_ctx, r.index) for r in reads] == [(b"r", 4)]  # after "x" and the new term's entry
