"""The Raft driver takes its state machine through a small interface (nodeos/cluster/statemachine.py)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nodeos.cluster.driver as driver_mod
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.statemachine import ReplicatedMap, StateMachine

PROTOCOL_METHODS = ("apply", "snapshot", "restore", "voter_policy", "event_seq", "new_events")


def test_cluster_map_is_a_replicated_map() -> None:
    m = ClusterMap()
    assert isinstance(m, StateMachine)
    assert isinstance(m, ReplicatedMap)
    for name in PROTOCOL_METHODS:
        want = list(inspect.signature(getattr(ReplicatedMap, name)).parameters)
        have = list(inspect.signature(getattr(ClusterMap, name)).parameters)
        assert have == want, f"ClusterMap.{name}{have} does not match the protocol's {want}"


def test_driver_imports_no_concrete_state_machine() -> None:
    tree = ast.parse(Path(inspect.getfile(driver_mod)).read_text())
    imported = {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module is not None
    } | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "nodeos.cluster.map" not in imported
    assert "nodeos.cluster.statemachine" in imported


def test_snapshot_restore_round_trip_sets_the_applied_index() -> None:
    m = ClusterMap()
    m.apply(1, encode_command("kv_put", {"key": "a", "value": 1}))
    seq = m.event_seq()
    m.apply(2, encode_command("add_node", {"node_id": 1, "addresses": {"peer": "127.0.0.1:1"}}))
    assert [e["kind"] for e in m.new_events(seq)] == ["node_joined"]
    other = ClusterMap()
    other.restore(m.snapshot(), 7)
    assert other.applied_index == 7
    assert other.kv_get("a") == 1 and other.nodes[1]["addresses"]["peer"] == "127.0.0.1:1"
    assert other.voter_policy() == m.voter_policy()
    other.restore(b"")
    assert other.applied_index == 0 and not other.nodes
