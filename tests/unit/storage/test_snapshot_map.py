"""Snapshots of replicated volumes in the map: the freeze, the phases driven by the primary's
and the replicas' reports, abort, drop, and the leader's refusals (decide)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.control import decide
from nodeos.errors import BadInput, OperationFailed
from tests.unit.storage.test_storage_map import M, cluster, create

VOL = "u-v"


def ready_mirror(nodes: tuple[int, ...] = (1, 2, 3)) -> M:
    """A 3-replica volume v, primary s1, every leg in sync (as the agents report it)."""
    m = cluster(3)
    create(m, "v", *nodes)
    in_sync(m, nodes)
    assert m.st["volumes"][VOL]["state"] == "ready"
    return m


def in_sync(
    m: M, nodes: tuple[int, ...], frozen: str | None = None, snaps: dict[str, Any] | None = None
) -> None:
    members = {n: "in-sync" for n in nodes[1:]}
    for n in nodes:
        rep: dict[str, Any] = {"state": "in-sync"}
        if n == nodes[0]:
            rep["members"] = members
            if frozen:
                rep["frozen"] = frozen
        m.report(n, replicas={VOL: rep}, snapshots=(snaps or {}).get(n, {}))


def snap_state(m: M, uuid: str = "s-1") -> tuple[str, str | None] | None:
    s = m.st["snapshots"].get(uuid)
    return None if s is None else (s["state"], s.get("phase"))


def test_a_snapshot_freezes_the_volume_then_is_taken_then_ready_and_thawed() -> None:
    m = ready_mirror()
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    assert snap_state(m) == ("creating", "freezing")
    assert m.st["volumes"][VOL]["freeze"] == "s-1"
    # A replica's snapshot reported before the primary holds the writes changes nothing.
    in_sync(m, (1, 2, 3), snaps={2: {"s-1": {"state": "ready"}}})
    assert snap_state(m) == ("creating", "freezing")
    in_sync(m, (1, 2, 3), frozen="s-1")
    assert snap_state(m) == ("creating", "taking")
    ready = {n: {"s-1": {"state": "ready"}} for n in (1, 2, 3)}
    in_sync(m, (1, 2, 3), frozen="s-1", snaps={1: ready[1], 2: ready[2]})
    assert snap_state(m) == ("creating", "taking")  # s3 has not taken its replica's yet
    in_sync(m, (1, 2, 3), frozen="s-1", snaps=ready)
    assert snap_state(m) == ("ready", None)
    assert m.st["volumes"][VOL]["freeze"] is None


def test_replica_snapshots_taken_after_the_primary_let_writes_go_never_make_it_ready() -> None:
    m = ready_mirror()
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-1")
    # The primary's latest report no longer holds the freeze: not one point in time any more.
    ready = {n: {"s-1": {"state": "ready"}} for n in (1, 2, 3)}
    in_sync(m, (1, 2, 3), frozen=None, snaps=ready)
    assert snap_state(m) == ("creating", "taking")


def test_a_failed_replica_snapshot_drops_it_and_clears_the_freeze() -> None:
    m = ready_mirror()
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-1", snaps={2: {"s-1": {"state": "failed", "error": "lvcreate"}}})
    assert snap_state(m) is None and "snap" not in m.st["names"]
    assert m.st["volumes"][VOL]["freeze"] is None


def test_abort_drops_a_snapshot_in_progress_but_not_a_ready_one() -> None:
    m = ready_mirror()
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-1")
    assert m.ok("snapshot_abort", uuid="s-1", reason="held 10 s")["aborted"] is True
    assert snap_state(m) is None and m.st["volumes"][VOL]["freeze"] is None
    assert m.ok("snapshot_abort", uuid="s-1")["aborted"] is False  # again: nothing to do

    m.ok("snapshot_create", uuid="s-2", name="snap2", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-2")
    in_sync(m, (1, 2, 3), frozen="s-2", snaps={n: {"s-2": {"state": "ready"}} for n in (1, 2, 3)})
    assert m.ok("snapshot_abort", uuid="s-2")["aborted"] is False
    assert snap_state(m, "s-2") == ("ready", None)


def test_one_freeze_at_a_time_and_only_with_every_replica_in_sync() -> None:
    m = ready_mirror()
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    out = m.do("snapshot_create", uuid="s-2", name="snap2", volume="v")
    assert out["error"]["field"] == "name" and "'snap' is being taken" in out["error"]["message"]
    with pytest.raises(OperationFailed, match="'snap' is being taken"):
        decide.volume_snapshot(m.st, {"name": "v", "snapshot": "snap2"}, "s-2")
    m.ok("snapshot_delete", name="snap")  # deleting the one in progress lets the writes go
    assert m.st["volumes"][VOL]["freeze"] is None

    # s3's leg falls behind (the primary's mirror says so): refused, naming the node.
    m.report(1, replicas={VOL: {"state": "degraded", "members": {2: "in-sync", 3: "syncing"}}})
    with pytest.raises(OperationFailed, match="on s3 are not in sync") as err:
        decide.volume_snapshot(m.st, {"name": "v", "snapshot": "snap3"}, "s-3")
    assert err.value.field == "name"
    assert "error" in m.do("snapshot_create", uuid="s-3", name="snap3", volume="v")
    assert "snap3" not in m.st["names"]


def test_deleting_the_volume_drops_its_snapshot_in_progress() -> None:
    m = ready_mirror()
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    m.ok("volume_delete", name="v")
    assert snap_state(m) is None and "snap" not in m.st["names"]


def test_one_replica_snapshots_are_taken_at_once_as_before() -> None:
    m = cluster(3)
    uuid = create(m, "one", 2)
    m.report(2, replicas={uuid: {"state": "in-sync"}})
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="one")
    assert snap_state(m) == ("creating", None) and m.st["volumes"][uuid].get("freeze") is None
    m.report(2, replicas={uuid: {"state": "in-sync"}}, snapshots={"s-1": {"state": "ready"}})
    assert snap_state(m) == ("ready", None)


def ready_snapshot() -> M:
    m = ready_mirror()
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-1")
    in_sync(m, (1, 2, 3), frozen="s-1", snaps={n: {"s-1": {"state": "ready"}} for n in (1, 2, 3)})
    return m


def test_a_clone_of_a_replicated_snapshot_keeps_its_replicas_unless_told_otherwise() -> None:
    m = ready_snapshot()
    cmd, args = decide.volume_clone(m.st, {"snapshot": "snap", "name": "c"}, "u-c")
    assert cmd == "volume_create" and [s["node"] for s in args["placement"]] == [1, 2, 3]
    _, args = decide.volume_clone(m.st, {"snapshot": "snap", "name": "c", "replicas": 2}, "u-c")
    assert [s["node"] for s in args["placement"]] == [1, 2]
    with pytest.raises(BadInput) as err:
        decide.volume_clone(m.st, {"snapshot": "snap", "name": "c", "replicas": 1}, "u-c")
    assert err.value.field == "replicas" and err.value.allowed == [2, 3]


def test_a_clone_of_a_two_replica_snapshot_needs_exactly_two() -> None:
    m = cluster(3)
    create(m, "v", 1, 2)
    in_sync(m, (1, 2))
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    in_sync(m, (1, 2), frozen="s-1")
    in_sync(m, (1, 2), frozen="s-1", snaps={n: {"s-1": {"state": "ready"}} for n in (1, 2)})
    assert snap_state(m) == ("ready", None)
    for bad in (1, 3):
        with pytest.raises(BadInput) as err:
            decide.volume_clone(m.st, {"snapshot": "snap", "name": "c", "replicas": bad}, "u-c")
        assert err.value.field == "replicas" and err.value.allowed == [2]


def test_a_primary_whose_data_plane_cannot_freeze_mirror_writes_refuses_the_snapshot() -> None:
    m = ready_mirror()
    seq = m.st["reports"][1]["seq"] + 1
    spdk = {"name": "spdk", "mirror_write_freeze": False}
    m.ok("node_report", node_id=1, seq=seq, dataplane=spdk, replicas={VOL: {"state": "in-sync"}})
    out = m.do("snapshot_create", uuid="s-1", name="snap", volume="v")
    err = out["error"]
    assert err["code"] == "not_supported" and err["field"] == "snapshot", err
    assert "spdk data plane of its primary s1 has no mirror write freeze" in err["message"]
    assert "s-1" not in m.st["snapshots"] and not m.st["volumes"][VOL].get("freeze")
