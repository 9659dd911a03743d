"""The agent's plan after a failover (pure): the map moved a replicated volume's primary and
bumped its epoch; each node's data plane follows by one durable role change."""

from __future__ import annotations

from typing import Any

from nodeos.agent.plan import local_volume, plan
from nodeos.node import replicas
from tests.unit.node.test_replicas import UUID, three_node_map

# placement (2, 1, 3): node 2 is the first primary, at epoch 1


def pools(me: int) -> dict[str, dict[str, Any]]:
    return {"p": {"name": "p", "pool_id": f"pool{me}", "state": "ready", "drives": ["d"], "devices": ["/x"]}}


def ready(st: dict[str, Any], me: int) -> dict[str, dict[str, Any]]:
    """`me`'s record of the volume as the map had it when it was made (epoch 1), ready."""
    rec = dict(
        local_volume(st, st["volumes"][UUID], me), state="ready", lv_device=f"/dev/vg{me}/lv", secrets=[]
    )
    return {"v": rec}


def fail_over(st: dict[str, Any], to: int, in_sync: list[int] | None = None) -> dict[str, Any]:
    vol = st["volumes"][UUID]
    vol["primary"] = to
    vol["epoch"] += 1
    if in_sync is not None:
        vol["in_sync"] = in_sync
    return st


def report(st: dict[str, Any], nid: int, **rep: Any) -> None:
    st["reports"].setdefault(nid, {}).setdefault("replicas", {})[UUID] = rep


def steps(st: dict[str, Any], me: int, vols: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(s.op, s.data) for s in plan(st, me, pools(me), vols, {})]


def test_nothing_moves_while_the_map_keeps_its_primary() -> None:
    st = three_node_map()
    for me in (1, 2, 3):
        assert steps(st, me, ready(st, me)) == []


def test_a_secondary_retargets_its_replica_to_the_new_primary_once() -> None:
    st = three_node_map()
    have = ready(st, 3)
    assert have["v"]["primary_host_nqn"] == replicas.node_host_nqn("c" * 32, 2)
    fail_over(st, 1, [1, 3])
    (step,) = plan(st, 3, pools(3), have, {})
    assert step.op == "volume.retarget"
    assert step.record["primary_host_nqn"] == replicas.node_host_nqn("c" * 32, 1)
    assert (step.record["role"], step.record["epoch"], step.record["state"]) == (
        "secondary",
        2,
        "retargeting",
    )
    done = {"v": dict(step.record, state="ready")}
    assert steps(st, 3, done) == []


def test_the_new_primary_waits_until_every_up_in_sync_replica_exports_at_its_epoch() -> None:
    st = three_node_map()
    have = ready(st, 1)
    fail_over(st, 1, [1, 3])
    report(st, 3, state="syncing", step=None, epoch=1)
    assert steps(st, 1, have) == []  # node 3 still exports to the old primary
    report(st, 3, state="syncing", step="retargeting", epoch=2)
    assert steps(st, 1, have) == []  # not done yet
    report(st, 3, state="syncing", step=None, epoch=2)
    (step,) = plan(st, 1, pools(1), have, {})
    assert step.op == "volume.promote" and step.data["attach"] == [3]
    rec = step.record
    assert (rec["role"], rec["epoch"], rec["state"]) == ("primary", 2, "promoting")
    assert [r["node"] for r in rec["remotes"]] == [2, 3]  # every other slot, in placement order
    assert [r["slot"] for r in rec["remotes"]] == [0, 2]


def test_a_down_replica_does_not_hold_up_a_promotion_and_is_not_attached() -> None:
    st = three_node_map()
    have = ready(st, 1)
    fail_over(st, 1, [1, 3])
    st["nodes"][3]["health"] = "down"
    (step,) = plan(st, 1, pools(1), have, {})
    assert step.op == "volume.promote" and step.data["attach"] == []


def test_a_replica_outside_in_sync_is_never_promoted() -> None:
    st = three_node_map()
    have = ready(st, 1)
    assert steps(fail_over(st, 1, [3]), 1, have) == []


def test_a_volume_without_in_sync_counts_every_placement_node_in_sync() -> None:
    st = three_node_map()
    del st["volumes"][UUID]["in_sync"]  # a volume made before the field
    assert replicas.in_sync_of(st["volumes"][UUID]) == [2, 1, 3]
    have = ready(st, 1)
    fail_over(st, 1)
    report(st, 3, state="syncing", step=None, epoch=2)
    assert steps(st, 1, have) == []  # node 2 (the old primary) is up and counted in sync
    st["nodes"][2]["health"] = "down"
    ((op, data),) = steps(st, 1, have)
    assert op == "volume.promote" and data["attach"] == [3]


def test_the_old_primary_demotes_itself_keeping_what_it_must_detach() -> None:
    st = three_node_map()
    have = ready(st, 2)
    assert have["v"]["role"] == "primary"
    fail_over(st, 1, [1, 3])
    (step,) = plan(st, 2, pools(2), have, {})
    assert step.op == "volume.demote"
    rec = step.record
    assert (rec["role"], rec["epoch"], rec["state"]) == ("secondary", 2, "demoting")
    assert rec["primary_host_nqn"] == replicas.node_host_nqn("c" * 32, 1)
    assert [r["node"] for r in rec["remotes"]] == [1, 3]  # the legs it attached, detached by the demote
    # the front end it exports from now on is inaccessible
    assert replicas.front_end(dict(rec, device="/dev/md/x"), _spec()).ana_state == "inaccessible"


def test_a_primary_that_missed_an_epoch_steps_down_even_when_named_primary_again() -> None:
    st = three_node_map()
    have = ready(st, 2)
    fail_over(st, 1, [1, 3])
    fail_over(st, 2, [1, 2, 3])
    (step,) = plan(st, 2, pools(2), have, {})
    assert step.op == "volume.demote" and step.record["role"] == "secondary"


def test_the_primary_rejoins_a_replica_that_came_back_at_its_epoch() -> None:
    st = fail_over(three_node_map(), 1, [1, 3])
    have = {"v": dict(ready(st, 1)["v"], **replicas.record_fields(st, st["volumes"][UUID], 1))}
    assert have["v"]["role"] == "primary"
    report(st, 2, state="syncing", step=None, epoch=2)
    report(st, 3, state="syncing", step=None, epoch=2)
    report(st, 1, state="in-sync", epoch=1)
    assert steps(st, 1, have) == []  # my mirror has not reported at epoch 2 yet
    report(st, 1, state="degraded", epoch=2, members={2: "failed", 3: "in-sync"})
    report(st, 2, state="syncing", step=None, epoch=1)
    assert steps(st, 1, have) == []  # node 2 does not export at epoch 2 yet
    report(st, 2, state="syncing", step=None, epoch=2)
    ((op, data),) = steps(st, 1, have)
    assert op == "volume.rejoin" and data["attach"] == [2, 3] and data["rejoin"] == [2]
    report(st, 1, state="degraded", epoch=2, members={2: "syncing", 3: "in-sync"}, progress={2: 0.5})
    assert steps(st, 1, have) == []


def _spec() -> Any:
    from nodeos.dataplane.base import ExportSpec

    return ExportSpec(
        nqn="nqn.x:v", serial="s", pool_id="p", vol_id="v", uuid=UUID, nguid="0" * 32, listeners=()
    )


def test_a_primary_whose_mirror_is_not_assembled_after_a_restart_assembles_it_again() -> None:
    st = three_node_map()
    have = ready(st, 2)
    report(st, 1, state="syncing", step=None, epoch=1)
    report(st, 3, state="syncing", step=None, epoch=1)
    report(st, 2, state="failed", epoch=1, error="the mirror is not assembled")
    ((op, data),) = steps(st, 2, have)
    assert op == "volume.rejoin" and data["attach"] == [1, 3]
    st["nodes"][3]["health"] = "down"
    ((op, data),) = steps(st, 2, have)
    assert op == "volume.rejoin" and data["attach"] == [1]


def test_a_map_behind_the_epoch_a_node_followed_moves_nothing() -> None:
    """A map read back after a restart, older than what a record follows: a secondary of epoch 2
    is not promoted by an epoch-1 map naming it primary, a primary of epoch 2 not demoted."""
    st = three_node_map()  # epoch 1, node 2 primary, every node in sync
    sec = ready(st, 2)
    sec["v"] = dict(sec["v"], role="secondary", epoch=2)
    assert steps(st, 2, sec) == []
    prim = ready(st, 1)
    prim["v"] = dict(prim["v"], role="primary", epoch=2)
    assert steps(st, 1, prim) == []
    other = ready(st, 3)
    other["v"] = dict(other["v"], epoch=2)
    assert steps(st, 3, other) == []


def test_the_primary_takes_a_released_node_back_only_when_its_release_ends() -> None:
    """A node a rolling upgrade released for its update is up and exports at the epoch, yet its
    primary does not re-add its leg (it cut it on purpose) until the domain is past rejoin."""
    st = fail_over(three_node_map(), 1, [1, 3])
    have = {"v": dict(ready(st, 1)["v"], **replicas.record_fields(st, st["volumes"][UUID], 1))}
    report(st, 1, state="degraded", epoch=2, members={2: "failed", 3: "in-sync"})  # cut
    report(st, 2, state="syncing", step=None, epoch=2)
    report(st, 3, state="in-sync", step=None, epoch=2)
    domains = [{"name": "rack=b", "nodes": [2]}]
    st["upgrade"] = {"state": "running", "step": "rejoin", "at": 0, "domains": domains, "released": [2]}
    assert steps(st, 1, have) == []
    st["upgrade"]["step"] = "sync"  # the release ended: back by a re-add
    ((op, data),) = steps(st, 1, have)
    assert op == "volume.rejoin" and data["attach"] == [2, 3] and data["rejoin"] == [2]
