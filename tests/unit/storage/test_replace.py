"""Re-placing a lost or leaving replica, as the leader decides it and the map applies it: the lost
node's slot goes to a node on another failure domain, the new replica is in sync only once the
primary's mirror says so, a stale or unsafe decision is refused at apply, and copies are
throttled."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeos.cluster import events as map_events
from nodeos.errors import BadInput
from nodeos.storage import failover
from nodeos.storage.replace import ReplacePolicy, replace_commands

from .test_failover import T, apply_all, leases_all_renewing, ready
from .test_storage_map import GiB, M, cluster, create

P = ReplacePolicy(after_s=60.0)


def nodes_of(vol: dict[str, Any]) -> list[int]:
    return [s["node"] for s in vol["placement"]]


def mirror_says(m: M, uuid: str, **members: str) -> None:
    vol = m.st["volumes"][uuid]
    legs = {int(k[1:]): v for k, v in members.items()}
    m.report(vol["primary"], replicas={uuid: {"state": "in-sync", "members": legs, "epoch": vol["epoch"]}})


def decide(m: M, now: float, down_since: dict[int, float] | None = None, policy: ReplacePolicy = P) -> Any:
    return replace_commands(m.st, dict(down_since or {}), now, policy)


def test_a_replace_takes_the_lost_slot_and_the_copy_joins_in_sync_once_the_mirror_says_so() -> None:
    m = cluster(4)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=2, health="down", reason="lease ran out")
    mark = map_events.last_seq(m.st)
    out = m.ok("volume_replace_replica", uuid=uuid, epoch=1, old=2, node=4, pool_id="pool4", reason="test")
    assert out["node"] == 4
    assert vol["placement"] == [
        {"node": 1, "pool_id": "pool1"},
        {"node": 4, "pool_id": "pool4"},  # the same slot: survivors keep theirs
        {"node": 3, "pool_id": "pool3"},
    ]
    assert (vol["primary"], vol["epoch"], vol["in_sync"]) == (1, 1, [1, 3])
    assert m.st["paths"][uuid] == {1: "optimized", 4: "inaccessible", 3: "inaccessible"}
    (ev,) = [e for e in map_events.list_events(m.st, mark) if e["kind"] == "replica_replaced"]
    assert ev["node"] == 4 and "node 2" in ev["message"] and ev["severity"] == "warning"
    mirror_says(m, uuid, n4="syncing", n3="in-sync")
    assert vol["in_sync"] == [1, 3]
    mirror_says(m, uuid, n4="in-sync", n3="in-sync")
    assert vol["in_sync"] == [1, 4, 3]
    # The same decision again (retried by an old leader): node 2 holds nothing any more.
    again = m.do("volume_replace_replica", uuid=uuid, epoch=1, old=2, node=4, pool_id="pool4")
    assert again["error"]["field"] == "old"


def _refused(m: M, field: str, **args: Any) -> None:
    before = copy.deepcopy(m.st["volumes"])
    out = m.do("volume_replace_replica", **args)
    assert out["error"]["field"] == field, out
    assert m.st["volumes"] == before


def test_unsafe_or_stale_replacements_are_refused_at_apply_and_change_nothing() -> None:
    m = cluster(5)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    ok = {"uuid": uuid, "epoch": 1, "old": 2, "node": 4, "pool_id": "pool4"}
    _refused(m, "epoch", **dict(ok, epoch=0))
    _refused(m, "old", **dict(ok, old=1))  # the primary's slot moves by a failover
    _refused(m, "old", **dict(ok, old=5))  # not a replica
    _refused(m, "node", **dict(ok, node=3))  # holds one already
    _refused(m, "node", **dict(ok, node=9))  # not a member
    _refused(m, "placement", **dict(ok, pool_id="pool5"))  # not node 4's pool
    _refused(m, "uuid", **dict(ok, uuid="nope"))
    m.ok("node_set_state", node_id=4, state="draining")
    _refused(m, "node", **ok)
    m.ok("node_set_state", node_id=4, state="active")
    m.ok("node_health", node_id=4, health="down")
    _refused(m, "node", **ok)
    m.ok("node_health", node_id=4, health="up")
    # Spread: node 4 shares a rack with a survivor, as the labels are now.
    for n, rack in ((1, "a"), (2, "b"), (3, "c"), (4, "a")):
        m.ok("node_label", node_id=n, set={"rack": rack})
    vol = m.st["volumes"][uuid]
    vol["spread"] = "rack"
    _refused(m, "placement", **ok)
    vol["spread"] = "node"
    # The last in-sync replica is never replaced (a map whose primary's own leg is out of sync).
    vol["in_sync"] = [3]
    _refused(m, "old", **dict(ok, old=3))
    vol["in_sync"] = [1, 2, 3]
    m.ok("volume_replace_replica", **ok)
    assert vol["in_sync"] == [1, 3] and nodes_of(vol) == [1, 4, 3]


def test_a_down_secondary_is_replaced_only_after_the_grace_and_one_copy_at_a_time() -> None:
    m = cluster(5)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=2, health="down")
    m.ok("node_health", node_id=3, health="down")
    assert decide(m, 100.0, {2: 50.0, 3: 50.0}) == ([], {})  # 50 s < 60 s
    cmds, refused = decide(m, 111.0, {2: 50.0, 3: 50.0})
    assert refused == {}
    assert cmds == [
        (
            "volume_replace_replica",
            {
                "uuid": uuid,
                "epoch": 1,
                "old": 2,
                "node": 4,
                "pool_id": "pool4",
                "reason": "node 2 has been down for 61 s",
            },
        )
    ]
    apply_all(m, cmds)
    assert decide(m, 200.0, {3: 50.0}) == ([], {})  # node 4 is being copied: node 3 waits
    mirror_says(m, uuid, n4="in-sync", n3="failed")
    (cmd,) = decide(m, 200.0, {3: 50.0})[0]
    assert (cmd[1]["old"], cmd[1]["node"]) == (3, 5)
    apply_all(m, [cmd])
    assert nodes_of(vol) == [1, 4, 5]


def test_the_leader_counts_the_grace_from_when_it_saw_the_node_down() -> None:
    m = cluster(4)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=3, health="down")
    ls = leases_all_renewing(1000.0, 1, 2, 4)
    assert failover.decide(m.st, ls, 1000.0, T, P) == []
    assert ls.down_since == {3: 1000.0}
    for n in (1, 2, 4):
        ls.renewed(n, 1061.0, T)
    cmds = failover.decide(m.st, ls, 1061.0, T, P)
    assert [(c, a["old"], a["node"]) for c, a in cmds] == [("volume_replace_replica", 3, 4)]
    m.ok("node_health", node_id=3, health="up")
    failover.decide(m.st, ls, 1061.0, T, P)
    assert ls.down_since == {}


def test_a_drain_moves_primaries_first_then_replicas() -> None:
    m = cluster(4)
    a = create(m, "a", 1, 2, 3)
    b = create(m, "b", 2, 1, 3)
    ready(m, a, 1, 2, 3)
    ready(m, b, 2, 1, 3)
    m.ok("node_set_state", node_id=1, state="draining")
    ls = leases_all_renewing(10.0, 1, 2, 3, 4)
    cmds = failover.decide(m.st, ls, 10.0, T, P)
    assert [c for c, _ in cmds] == ["volume_handoff"]  # a's primary first, b's replica waits
    apply_all(m, cmds)
    m.report(1, replicas={a: {"state": "in-sync", "epoch": 1, "handed_off": 1}})
    apply_all(m, failover.decide(m.st, ls, 10.0, T, P))
    assert m.st["volumes"][a]["primary"] == 2
    # No primary left on node 1: its replica of b moves (a's old primary is out of sync: it
    # moves the same way, no copy of it needed first).
    cmds = failover.decide(m.st, ls, 10.0, T, P)
    assert sorted((a_["uuid"], a_["old"], a_["node"], a_["reason"]) for _, a_ in cmds) == [
        (a, 1, 4, "node 1 drains"),
        (b, 1, 4, "node 1 drains"),
    ]


def test_a_failed_pool_or_failing_drive_has_its_replicas_re_placed_at_once() -> None:
    m = cluster(4)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    m.report(
        3,
        drives={"d1": {"health": "failing"}},
        pools={"pool3": {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 99 * GiB}},
        replicas={uuid: {"state": "in-sync"}},
    )
    (cmd,) = decide(m, 0.0)[0]
    assert (cmd[1]["old"], cmd[1]["node"]) == (3, 4)
    assert cmd[1]["reason"] == "drive d1 of pool p on node 3 is failing"
    # A pool the node reports failed, with its leg already out of sync: not "a copy in flight".
    m.report(3, pools={"pool3": {"state": "failed"}}, replicas={uuid: {"state": "failed"}})
    mirror_says(m, uuid, n2="in-sync", n3="failed")
    assert vol["in_sync"] == [1, 2]
    (cmd,) = decide(m, 0.0)[0]
    assert cmd[1]["reason"] == "pool p on node 3 failed"


def test_no_room_is_a_refusal_naming_the_volume_and_nothing_is_proposed() -> None:
    m = cluster(3)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=3, health="down")
    cmds, refused = decide(m, 100.0, {3: 0.0})
    assert cmds == []
    assert "volume v: replica on node 3" in refused[(uuid, 3)]
    ls = leases_all_renewing(100.0, 1, 2)
    ls.down_since[3] = 0.0
    assert failover.decide(m.st, ls, 100.0, T, P) == []
    assert list(ls.refused) == [(uuid, 3)]


def test_copies_are_throttled_per_node_and_cluster_wide() -> None:
    m = cluster(5)
    uuids = [create(m, f"v{i}", 1, 2) for i in range(4)]
    for u in uuids:
        ready(m, u, 1, 2)
    m.ok("node_health", node_id=2, health="down")
    cmds, _ = decide(m, 100.0, {2: 0.0}, ReplacePolicy(after_s=60.0, per_node=2, total=8))
    assert len(cmds) == 2  # node 1 is the source of every copy: 2 at a time
    cmds, _ = decide(m, 100.0, {2: 0.0}, ReplacePolicy(after_s=60.0, per_node=5, total=3))
    assert len(cmds) == 3 and len({a["node"] for _, a in cmds}) == 3  # spread over the free nodes
    apply_all(m, cmds)
    cmds, _ = decide(m, 100.0, {2: 0.0}, ReplacePolicy(after_s=60.0, per_node=5, total=3))
    assert cmds == []  # 3 copies in flight


def test_policy_values_are_checked() -> None:
    with pytest.raises(BadInput) as e:
        ReplacePolicy(after_s=0.5)
    assert e.value.field == "replace_after_s"
    with pytest.raises(BadInput) as e:
        ReplacePolicy(per_node=0)
    assert e.value.field == "per_node"


def test_node_show_says_what_a_drain_still_has_to_move() -> None:
    from nodeos.cli.nodes import drain_left
    from nodeos.control.views import node_view

    m = cluster(4)
    a = create(m, "a", 1, 2)
    b = create(m, "b", 2, 1)
    create(m, "solo", 1)
    ready(m, a, 1, 2)
    ready(m, b, 2, 1)
    n = node_view(m.st, 1)
    assert (n["primaries"], n["secondaries"], n["single_copies"]) == (["a"], ["b"], ["solo"])
    assert drain_left(n) == "1 primary to hand over: a; 1 replica to re-place: b"
    m.ok("volume_replace_replica", uuid=b, epoch=1, old=1, node=3, pool_id="pool3")
    assert drain_left(node_view(m.st, 1)) == "1 primary to hand over: a"
    m.ok("node_health", node_id=1, health="down")
    m.ok("volume_failover", uuid=a, epoch=1, to=2)
    m.ok("volume_replace_replica", uuid=a, epoch=2, old=1, node=4, pool_id="pool4")
    assert drain_left(node_view(m.st, 1)) is None


def test_a_copy_that_could_not_be_created_goes_elsewhere_not_there_again() -> None:
    m = cluster(5)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    m.ok("node_health", node_id=3, health="down")
    m.ok("volume_replace_replica", uuid=uuid, epoch=1, old=3, node=4, pool_id="pool4")
    assert decide(m, 0.0) == ([], {})  # node 4 is being copied to
    m.report(4, replicas={uuid: {"state": "failed", "step": "volume.create", "error": "no space"}})
    (cmd,) = decide(m, 0.0)[0]
    assert (cmd[1]["old"], cmd[1]["node"]) == (4, 5)
    assert cmd[1]["reason"] == "node 4 could not make its replica (volume.create: no space)"


def test_a_draining_node_that_is_down_gets_no_grace() -> None:
    m = cluster(4)
    uuid = create(m, "v", 1, 2)
    ready(m, uuid, 1, 2)
    m.ok("node_health", node_id=2, health="down")
    assert decide(m, 10.0, {2: 5.0}) == ([], {})
    m.ok("node_set_state", node_id=2, state="draining")
    (cmd,) = decide(m, 10.0, {2: 5.0})[0]
    assert (cmd[1]["old"], cmd[1]["reason"]) == (2, "node 2 drains (and is down)")
