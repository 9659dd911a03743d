"""A published copy on a node that went down before it joined is made elsewhere (feature level 4):
the leader's decision (nodeos/storage/publish_replace.py) and the map's checks at apply
(`publish_replace`, nodeos/storage/publish_map.py). Seen in the soak: a publish whose third copy
was placed on a node powered off a moment later waited 840 s for that node."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.cluster import events as map_events
from nodeos.storage.publish_replace import publish_replace_commands
from nodeos_devtools.sim.mapcheck import check_state
from tests.unit.storage.test_publish import SHA, copy, publish, snapshot_on_three_of
from tests.unit.storage.test_storage_map import GiB, M


def level(m: M, n: int = 4) -> M:
    m.ok("init_cluster", cluster_id="c1", feature_level=n)
    return m


def nodes(pub: dict[str, Any]) -> list[int]:
    return [s["node"] for s in pub["placement"]]


def down(m: M, nid: int) -> None:
    m.ok("node_health", node_id=nid, health="down", reason="test")


def decide_and_apply(m: M) -> list[dict[str, Any]]:
    out = []
    for cmd, args in publish_replace_commands(m.st):
        out.append(m.ok(cmd, **args))
        check_state(m.st)
    return out


def test_a_copy_on_a_node_down_before_it_joined_is_made_on_another_and_the_volume_turns_ready() -> None:
    m = level(snapshot_on_three_of(5))
    pub = publish(m, replicas=4)  # s1 (source), s2, s3 (seeds), s4 (a full copy)
    for nid in (1, 2, 3):
        copy(m, nid, "ready", SHA)
    copy(m, 4, "copying", None, progress=0.1)
    mark = map_events.last_seq(m.st)
    down(m, 4)
    (moved,) = decide_and_apply(m)
    assert moved["old"] == 4 and moved["node"] == 5
    assert nodes(pub) == [1, 2, 3, 5] and pub["state"] == "publishing"
    assert 5 in pub["copy_from"] and 4 not in pub["copy_from"]  # fed by a joined replica
    (ev,) = [e for e in map_events.appended_since(m.st, mark + 1) if e["kind"] == "replica_replaced"]
    assert "s4 went down before its copy joined" in ev["message"] and ev["node"] == 5
    copy(m, 5, "ready", SHA)
    assert pub["state"] == "ready"  # the console's publish returns: no wait for s4
    assert decide_and_apply(m) == []


@pytest.mark.parametrize(
    "case",
    ["joined", "source", "up", "ready", "no other node", "level 3"],
)
def test_a_slot_stays_where_moving_it_gains_nothing_or_loses_something(case: str) -> None:
    m = snapshot_on_three_of(5 if case == "no other node" else 6)
    level(m, 3 if case == "level 3" else 4)
    pub = publish(m, replicas=5)  # s1 (source), s2, s3 (seeds), s4, s5
    if case == "source":  # down before it even read its copy: it records the checksum, never moved
        down(m, 1)
        assert publish_replace_commands(m.st) == []
        return
    for nid in (1, 2, 3):
        copy(m, nid, "ready", SHA)
    done = case in ("joined", "ready")
    copy(m, 4, "ready" if done else "copying", SHA if done else None)
    copy(m, 5, "ready" if case == "ready" else "copying", SHA if case == "ready" else None)
    assert pub["state"] == ("ready" if case == "ready" else "publishing")
    if case != "up":
        down(m, 4)  # "joined": s4 serves hosts already; s5 still copying keeps the volume publishing
    assert publish_replace_commands(m.st) == []


def test_the_new_copy_keeps_the_replicas_racks_apart() -> None:
    racks = {1: "a", 2: "b", 3: "c", 4: "d", 5: "a", 6: "e"}
    m = level(snapshot_on_three_of(6, labels=racks))
    pub = publish(m, replicas=4, spread="rack")
    assert nodes(pub) == [1, 2, 3, 4] or sorted(nodes(pub)[3:]) in ([4], [6])
    last = nodes(pub)[3]
    copy(m, 1, "ready", SHA)
    down(m, last)
    (moved,) = decide_and_apply(m)
    assert moved["node"] not in (5, last)  # s5 shares rack a with the source


def test_the_map_refuses_a_move_that_no_longer_holds_at_apply() -> None:
    m = level(snapshot_on_three_of(5))
    pub = publish(m, replicas=4)
    copy(m, 1, "ready", SHA)
    args = {"uuid": pub["uuid"], "old": 4, "node": 5, "pool_id": "pool5"}
    err = m.do("publish_replace", **args)["error"]  # s4 is up
    assert err["field"] == "old" and "not down" in err["message"]
    down(m, 4)
    for bad, field in (
        ({"old": 1}, "old"),  # the source
        ({"node": 2, "pool_id": "pool2"}, "node"),  # already holds a slot
        ({"pool_id": "nope"}, "pool_id"),
        ({"node": 99}, "node"),
        ({"uuid": "u-none"}, "uuid"),
    ):
        before = repr(m.st["published"])
        err = m.do("publish_replace", **{**args, **bad})["error"]
        assert err["field"] == field, (bad, err)
        assert repr(m.st["published"]) == before  # nothing changed
    down(m, 5)
    assert m.do("publish_replace", **args)["error"]["field"] == "node"
    assert nodes(pub) == [1, 2, 3, 4]


def test_below_level_4_the_map_never_applies_a_move() -> None:
    m = level(snapshot_on_three_of(5), 3)
    pub = publish(m, replicas=4)
    copy(m, 1, "ready", SHA)
    down(m, 4)
    err = m.do("publish_replace", uuid=pub["uuid"], old=4, node=5, pool_id="pool5")["error"]
    assert err["field"] == "cmd" and nodes(pub) == [1, 2, 3, 4]


@pytest.mark.parametrize("lvl", [3, 4])
def test_an_unpublish_does_not_wait_for_a_down_node_from_level_4(lvl: int) -> None:
    """As a delete: the node, back, finds the volume gone and removes its copy (agent/published.py)."""
    m = level(snapshot_on_three_of(3), lvl)
    publish(m)
    for nid in (1, 2, 3):
        copy(m, nid, "ready", SHA)
    down(m, 3)
    m.ok("volume_unpublish", name="model", force=True)
    for nid in (1, 2):
        m.report(nid, pools={f"pool{nid}": {"state": "ready", "size_bytes": GiB}}, published={})
    check_state(m.st)
    gone = "u-model" not in m.st["published"]
    assert gone == (lvl >= 4), m.st["published"].get("u-model", {}).get("state")
    if gone:
        ev = [e for e in map_events.list_events(m.st) if e["kind"] == "volume_unpublished"][-1]
        assert "s3 (down) removes its copy when it returns" in ev["message"]
    else:  # level 3: it waits for s3 to come back and drop its copy
        m.ok("node_health", node_id=3, health="up", reason="test")
        m.report(3, pools={"pool3": {"state": "ready", "size_bytes": GiB}}, published={})
        assert "u-model" not in m.st["published"]
