"""The cluster feature level (nodeos/cluster/features.py): pure decisions, and the map's stop."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from nodeos.cluster import commands, features
from nodeos.cluster.feature_member import command_of, known_level_from_env
from nodeos.cluster.map import SCHEMA_VERSION, ClusterMap, encode_command
from nodeos.errors import BadInput, NotSupported


def _map(known_level: int = features.LEVEL, *levels: int) -> ClusterMap:
    """A map with init_cluster and one add_node per entry of `levels` (each node's knows_level)."""
    m = ClusterMap(known_level)
    m.apply(1, encode_command("init_cluster", {"cluster_id": "c1"}))
    for i, lvl in enumerate(levels, start=1):
        args = {"node_id": i, "release": features.LEVELS[lvl], "knows_level": lvl}
        assert "result" in m.apply(1 + i, encode_command("add_node", args))
    return m


def test_every_command_has_a_known_level_and_the_new_ones_are_level_2() -> None:
    assert all(c.level in features.LEVELS for c in commands.COMMANDS)
    assert features.command_level("kv_delete", 1) == 2
    assert features.command_level("set_feature_level", 1) == 2
    assert features.command_level("kv_put", 1) == 1
    assert features.command_level("kv_put", 9) is None and features.command_level("nope", 1) is None
    assert features.command_level("host_add", 3) == 2 and features.command_level("host_update", 2) == 2
    # this release knows its newest level: a member never says "release X, knows level N" with X
    # older than the release the level ships with
    import nodeos

    def tup(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    assert tup(features.LEVELS[features.LEVEL]) <= tup(nodeos.__version__)


def test_a_new_cluster_starts_at_its_first_members_level_or_lower_when_asked() -> None:
    m = ClusterMap()
    assert "result" in m.apply(1, encode_command("init_cluster", {"cluster_id": "c", "feature_level": 2}))
    assert features.cluster_level(m.state) == 2
    # a map from before the argument: level 1, as before
    old = ClusterMap()
    assert "result" in old.apply(1, encode_command("init_cluster", {"cluster_id": "c"}))
    assert features.cluster_level(old.state) == 1
    assert features.check_init_level(None) == features.LEVEL
    assert features.check_init_level(1) == 1
    for bad in (0, features.LEVEL + 1, "2", True):
        with pytest.raises(BadInput) as ei:
            features.check_init_level(bad)
        assert ei.value.field == "feature_level"
    assert features.check_init_level(None, known_level=1) == 1


def test_members_say_what_they_know_in_add_node_and_node_update() -> None:
    m = _map(features.LEVEL, 1)
    assert m.nodes[1]["knows_level"] == 1 and m.nodes[1]["release"] == "0.1.0"
    m.apply(3, encode_command("node_update", {"node_id": 1, "release": "0.2.0", "knows_level": 2}))
    assert m.nodes[1]["knows_level"] == 2 and m.nodes[1]["addresses"] == {}
    r = m.apply(4, encode_command("node_update", {"node_id": 1, "knows_level": "two"}))
    assert r["error"]["field"] == "knows_level" and m.nodes[1]["knows_level"] == 2
    # A member that reports nothing (a release before levels) knows level 1.
    assert features.member_level({}) == 1


def test_the_level_rises_only_when_every_member_knows_it() -> None:
    m = _map(features.LEVEL, 2, 1)
    with pytest.raises(BadInput, match=r"node 2 \(node-2, release 0.1.0, knows level 1\)") as err:
        features.check_raise(m.state, 2)
    assert err.value.field == "feature_level"
    # A Raft member not in the map yet counts as knowing level 1.
    m2 = _map(features.LEVEL, 2)
    with pytest.raises(BadInput, match="node 7"):
        features.check_raise(m2.state, 2, members=[1, 7])
    assert features.check_raise(m2.state, 2, members=[1]) == 2
    # The map's handler holds the same rule: refused, recorded, the level unchanged.
    r = m.apply(4, encode_command("set_feature_level", {"level": 2}))
    assert r["error"]["field"] == "feature_level" and features.cluster_level(m.state) == 1
    r = m2.apply(3, encode_command("set_feature_level", {"level": 2}))
    assert r["result"] == {"feature_level": 2, "previous": 1} and m2.state["feature_level"] == 2
    assert m2.state["events"]["log"][-1]["kind"] == "feature_level_raised"


@pytest.mark.parametrize("level", [1, 0, "2", features.LEVEL + 1])
def test_a_level_is_never_lowered_nor_raised_beyond_this_release(level: Any) -> None:
    m = _map(features.LEVEL, 2)
    m.state["feature_level"] = 1 if level != 1 else 2
    with pytest.raises(BadInput) as err:
        features.check_raise(m.state, level)
    assert err.value.field == "feature_level"


def test_a_command_above_the_cluster_level_is_refused_before_raft() -> None:
    st = _map(features.LEVEL, 2, 1).state
    with pytest.raises(NotSupported, match="needs cluster feature level 2") as err:
        features.check_proposal(st, "kv_delete", 1)
    assert "cluster set feature-level 2" in str(err.value)
    features.check_proposal(st, "kv_put", 1)
    features.check_proposal(st, "set_feature_level", 1)  # checked by check_raise instead
    with pytest.raises(BadInput, match="unknown to this node"):
        features.check_proposal(st, "launch_rockets", 1)
    with pytest.raises(BadInput, match="unknown to this node"):
        features.check_proposal(st, "kv_put", 2)
    with pytest.raises(BadInput, match="unknown to this node"):  # an "older" node never proposes it
        features.check_proposal({**st, "feature_level": 2}, "kv_delete", 1, known_level=1)
    features.check_proposal({**st, "feature_level": 2}, "kv_delete", 1)


def test_a_node_older_than_the_cluster_level_is_refused_at_join() -> None:
    m = _map(features.LEVEL, 2)
    m.apply(3, encode_command("set_feature_level", {"level": 2}))
    with pytest.raises(BadInput, match=r"feature level 2.*release 0\.1\.0.*release 0\.2\.0 or newer") as err:
        features.check_join(m.state, 5, {"release": "0.1.0", "knows_level": 1})
    assert err.value.field == "release"
    with pytest.raises(BadInput, match=r"0\.1\.0 or older"):  # it reports nothing: before levels
        features.check_join(m.state, 5, {})
    features.check_join(m.state, 5, features.member_report())
    # The map refuses it too, whoever proposes it.
    r = m.apply(4, encode_command("add_node", {"node_id": 5, "knows_level": 1}))
    assert r["error"]["field"] == "release" and 5 not in m.nodes


def test_an_entry_this_node_does_not_know_stops_the_map_until_a_newer_release() -> None:
    old = _map(1, 2, 2)  # a node whose release knows level 1 only (the test override)
    new = _map(features.LEVEL, 2, 2)
    entries = [
        encode_command("set_feature_level", {"level": 2}),
        encode_command("kv_put", {"key": "a", "value": 1}),
        encode_command("kv_delete", {"key": "a"}),
        encode_command("kv_put", {"key": "b", "value": 2}),
    ]
    for i, data in enumerate(entries, start=4):
        new.apply(i, data)
        old.apply(i, data)
    assert new.applied_index == 7 and new.kv_get("b") == 2 and new.stalled is None
    # The older node stopped at the first entry it does not know, and applied nothing after it.
    assert old.applied_index == 3 and old.kv_get("a") is None and old.kv_get("b") is None
    assert old.stalled is not None and old.stalled["index"] == 4
    assert old.stalled["message"].startswith("needs release >= 0.2.0 to apply entry 4")
    assert old.state["rejected"] == []
    # "Upgraded": the same log applied by a map that knows the level gives the same map.
    upgraded = ClusterMap()
    upgraded.restore(old.snapshot(), old.applied_index)
    for i, data in enumerate(entries, start=4):
        upgraded.apply(i, data)
    assert upgraded.state == new.state


def test_a_snapshot_of_a_newer_map_is_refused_whole() -> None:
    new = _map(features.LEVEL, 2)
    new.apply(3, encode_command("set_feature_level", {"level": 2}))
    new.apply(4, encode_command("kv_put", {"key": "k", "value": 1}))
    old = _map(1, 1)
    before = old.snapshot()
    old.restore(new.snapshot(), 4)
    assert old.stalled is not None and "feature level 2" in old.stalled["message"]
    assert old.snapshot() == before and old.applied_index == 2  # not half-read
    assert "error" in old.apply(5, encode_command("kv_put", {"key": "x", "value": 1}))
    state = msgpack.unpackb(new.snapshot(), raw=False, strict_map_key=False)
    state["schema"] = SCHEMA_VERSION + 1
    m = ClusterMap()
    m.restore(msgpack.packb(state, use_bin_type=True), 4)
    assert m.stalled is not None and f"map format {SCHEMA_VERSION + 1}" in m.stalled["message"]
    # A snapshot it can read clears the stop (a restart with a newer release).
    fresh = ClusterMap()
    fresh.restore(new.snapshot(), 4)
    assert fresh.stalled is None and fresh.kv_get("k") == 1 and fresh.applied_index == 4


def test_the_test_override_and_the_proposal_decoder() -> None:
    assert known_level_from_env({}) == features.LEVEL
    assert known_level_from_env({"NODEOS_TEST_KNOWN_LEVEL": "1"}) == 1
    with pytest.raises(ValueError):
        known_level_from_env({"NODEOS_TEST_KNOWN_LEVEL": str(features.LEVEL + 1)})
    assert command_of(encode_command("kv_delete", {"key": "k"})) == ("kv_delete", 1)
    assert command_of(b"\xc1") == (None, None)
