"""The map's event log as an operator reads it: each transition of the map records its event
once (with what, why, node, volume), the log is bounded, carries the proposer's time, and
survives snapshot/restore, also from a snapshot older than the log."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from nodeos.cluster import events as map_events
from nodeos.cluster.map import ClusterMap, encode_command
from tests.unit.storage.test_storage_map import GiB, M, cluster, create


def kinds(m: M, since: int = 0) -> list[str]:
    return [e["kind"] for e in map_events.list_events(m.st, since)]


def last(m: M) -> int:
    return map_events.last_seq(m.st)


def only(m: M, since: int, kind: str) -> dict[str, Any]:
    got = map_events.list_events(m.st, since)
    assert [e["kind"] for e in got] == [kind], got
    return got[0]


def test_members_and_pools_record_joined_created_left() -> None:
    m = cluster(2)
    assert kinds(m) == ["node_joined", "pool_created", "node_joined", "pool_created"]
    joined = map_events.list_events(m.st)[0]
    assert joined["node"] == 1 and "s1" in joined["message"]
    m.report(2, pools={"pool2": {"state": "ready", "size_bytes": GiB, "free_bytes": GiB}})
    assert kinds(m).count("pool_created") == 2  # a repeated report is not a new event
    mark = last(m)
    m.ok("pool_delete", node_id=2, name="p")
    m.report(2, pools={})
    assert only(m, mark, "pool_deleted")["pool"] == "p"
    mark = last(m)
    m.ok("remove_node", node_id=2)
    assert only(m, mark, "node_left")["node"] == 2


def test_a_pool_that_fails_says_why() -> None:
    m = M()
    m.ok("add_node", node_id=1, name="s1")
    m.ok("pool_create", node_id=1, name="p", pool_id="pool1", drives=["d1"], devices=["/dev/x"])
    mark = last(m)
    m.report(1, pools={"pool1": {"state": "failed", "error": "vgcreate: device busy"}})
    e = only(m, mark, "pool_failed")
    assert e["severity"] == "critical" and e["reason"] == "vgcreate: device busy" and e["node"] == 1


def test_volume_created_ready_once_then_deleted() -> None:
    m = cluster()
    mark = last(m)
    uuid = create(m, "v", 1, 2)
    assert only(m, mark, "volume_created")["volume"] == uuid
    mark = last(m)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.report(2, replicas={uuid: {"state": "syncing"}})
    assert kinds(m, mark) == []
    m.report(2, replicas={uuid: {"state": "in-sync"}})
    m.report(2, replicas={uuid: {"state": "in-sync"}, "other": {"state": "creating"}})
    assert only(m, mark, "volume_ready")["volume"] == uuid
    mark = last(m)
    m.ok("volume_delete", name="v")
    m.report(1, replicas={})
    assert kinds(m, mark) == []  # node 2 still holds its replica
    m.report(2, replicas={})
    assert only(m, mark, "volume_deleted")["volume"] == uuid


def test_a_failed_create_names_node_step_and_error() -> None:
    m = cluster()
    uuid = create(m, "v", 1, 2)
    mark = last(m)
    m.report(2, replicas={uuid: {"state": "failed", "step": "volume.create", "error": "lvcreate: no space"}})
    e = only(m, mark, "volume_failed")
    assert (e["node"], e["step"], e["volume"]) == (2, "volume.create", uuid)
    assert e["reason"] == "lvcreate: no space"
    assert "s2" in e["message"] and e["severity"] == "critical"


def test_replica_leaving_in_sync_and_coming_back() -> None:
    m = cluster()
    uuid = create(m, "v", 1, 2)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.report(2, replicas={uuid: {"state": "in-sync"}})
    mark = last(m)
    # The primary's mirror says what it sees of the secondary.
    m.report(1, replicas={uuid: {"state": "in-sync", "members": {2: "failed"}}})
    e = only(m, mark, "replica_failed")
    assert (e["node"], e["volume"], e["severity"]) == (2, uuid, "critical")
    mark = last(m)
    m.report(1, replicas={uuid: {"state": "in-sync", "members": {2: "syncing"}}})
    assert only(m, mark, "rebuild_started")["node"] == 2
    mark = last(m)
    m.report(1, replicas={uuid: {"state": "in-sync", "members": {2: "in-sync"}}})
    assert only(m, mark, "rebuild_finished")["node"] == 2
    mark = last(m)
    m.report(2, replicas={uuid: {"state": "degraded"}})
    m.report(1, replicas={uuid: {"state": "in-sync"}})  # the mirror no longer speaks for node 2
    assert kinds(m, mark) == ["replica_degraded"]
    m.report(2, replicas={uuid: {"state": "in-sync"}})
    assert kinds(m, mark) == ["replica_degraded", "replica_in_sync"]


def test_grants_snapshots_and_their_events() -> None:
    m = cluster()
    uuid = create(m, "v", 1)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    h = "nqn.2014-08.com.example:h1"
    m.ok("host_add", nqn=h, dhchap_secret="DHHC-1:00:secret:")
    mark = last(m)
    m.ok("volume_hosts", name="v", host=h, add=True)
    m.ok("volume_hosts", name="v", host=h, add=True)  # no change, no event
    m.ok("volume_hosts", name="v", host=h, add=False)
    assert kinds(m, mark) == ["host_granted", "host_revoked"]
    assert all(e["host"] == h for e in map_events.list_events(m.st, mark))
    assert "secret" not in str(m.st[map_events.SECTION])
    mark = last(m)
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    m.report(1, replicas={uuid: {"state": "in-sync"}}, snapshots={"s-1": {"state": "ready"}})
    assert only(m, mark, "snapshot_taken")["snapshot"] == "snap"
    mark = last(m)
    m.ok("snapshot_delete", name="snap")
    m.report(1, replicas={uuid: {"state": "in-sync"}}, snapshots={})
    assert only(m, mark, "snapshot_dropped")["reason"] == "deleted"
    m.ok("snapshot_create", uuid="s-2", name="snap2", volume="v")
    mark = last(m)
    m.report(1, replicas={uuid: {"state": "in-sync"}}, snapshots={"s-2": {"state": "failed", "error": "x"}})
    e = only(m, mark, "snapshot_dropped")
    assert e["node"] == 1 and e["severity"] == "warning" and "failed on node 1" in e["reason"]


def test_dataplane_and_drives_from_reports() -> None:
    m = cluster(1)
    mark = last(m)

    def report(error: str | None, health: str) -> None:
        seq = m.st["reports"][1]["seq"] + 1
        m.ok(
            "node_report",
            node_id=1,
            seq=seq,
            dataplane={"name": "kernel", "error": error},
            drives={"d1": {"health": health}},
        )

    report(None, "ok")
    report("lvs: timed out", "ok")
    report("lvs: timed out", "failing")
    report(None, "failing")
    assert kinds(m, mark) == ["dataplane_down", "drive_failed", "dataplane_up"]
    down = map_events.list_events(m.st, mark)[0]
    assert down["node"] == 1 and "lvs: timed out" in down["message"]


def test_events_carry_the_proposers_time_and_the_log_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(map_events, "MAX_EVENTS", 3)
    m = ClusterMap()
    for i in range(1, 6):
        m.apply(i, encode_command("add_node", {"node_id": i}), at=1000.0 + i)
    m.apply(6, encode_command("add_node", {"node_id": 6}))  # an entry from before time stamps
    got = map_events.list_events(m.state)
    assert [e["seq"] for e in got] == [4, 5, 6] and [e["node"] for e in got] == [4, 5, 6]
    assert [e["at"] for e in got] == [1004.0, 1005.0, 1005.0]
    # record_event keeps the time its proposer put in it
    m.apply(7, encode_command("record_event", {"kind": "drift_found", "message": "x", "at": 5.0}), at=9.0)
    assert map_events.list_events(m.state, 6)[0]["at"] == 5.0


def test_snapshot_restore_keeps_the_log_and_older_snapshots_work() -> None:
    m = cluster(2)
    r = ClusterMap()
    r.restore(m.m.snapshot())
    assert map_events.list_events(r.state) == map_events.list_events(m.st)
    old = msgpack.unpackb(m.m.snapshot(), raw=False, strict_map_key=False)
    del old[map_events.SECTION]  # a map from before the event log
    o = ClusterMap()
    o.restore(msgpack.packb(old, use_bin_type=True))
    assert map_events.list_events(o.state) == []
    o.apply(o.applied_index + 1, encode_command("add_node", {"node_id": 9}), at=1.0)
    assert [(e["seq"], e["kind"]) for e in map_events.list_events(o.state)] == [(1, "node_joined")]


def test_a_replicated_snapshot_is_taken_once_and_an_abort_says_why() -> None:
    from tests.unit.storage.test_snapshot_map import in_sync, ready_mirror

    m = ready_mirror()
    mark = last(m)
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-1")
    ready = {n: {"s-1": {"state": "ready"}} for n in (1, 2, 3)}
    in_sync(m, (1, 2, 3), frozen="s-1", snaps=ready)
    in_sync(m, (1, 2, 3), frozen=None, snaps=ready)  # thawed: still one event
    assert only(m, mark, "snapshot_taken")["snapshot"] == "snap"
    mark = last(m)
    m.ok("snapshot_create", uuid="s-2", name="snap2", volume="v")
    in_sync(m, (1, 2, 3), frozen="s-2", snaps=ready)
    m.ok("snapshot_abort", uuid="s-2", reason="held 10 s")
    e = only(m, mark, "snapshot_dropped")
    assert e["snapshot"] == "snap2" and e["reason"] == "aborted by the primary: held 10 s"
    mark = last(m)
    m.ok("snapshot_create", uuid="s-3", name="snap3", volume="v")
    m.ok("volume_delete", name="v")
    assert only(m, mark, "snapshot_dropped")["reason"] == "volume v deleted"


def test_entries_from_before_the_time_stamp_still_apply() -> None:
    from nodeos.cluster import entry

    cmd = encode_command("add_node", {"node_id": 1})
    assert entry.unframe(entry.frame(b"r1", cmd, 12.5)) == (b"r1", cmd, 12.5)
    assert entry.unframe(msgpack.packb([b"r0", cmd], use_bin_type=True)) == (b"r0", cmd, None)
    assert entry.unframe(b"\xc1junk") == (b"", b"\xc1junk", None)
    assert entry.command_name(cmd) == "add_node" and entry.command_name(b"\xc1") == ""
