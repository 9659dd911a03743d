"""Which of a node's step errors the agent keeps (reports, and does not retry): only while the map
still wants the same object in the same way (nodeos/agent/agent.py `error_still_wanted`)."""

from __future__ import annotations

from typing import Any

from nodeos.agent.agent import error_still_wanted
from nodeos.storage.snapshot_map import settle_snapshot

SNAP_ERR = {"step": "volume.snapshot", "error": "the freeze expired after 30 s", "uuid": "s-1"}


def _st(snap_state: str) -> dict[str, Any]:
    snap = {"uuid": "s-1", "name": "snap1", "state": snap_state, "volume": "v-1", "volume_name": "v",
            "phase": None, "placement": [{"node": 1}, {"node": 2}]}  # fmt: skip
    return {
        "names": {"snap1": {"kind": "snapshot", "uuid": "s-1"}},
        "snapshots": {"s-1": snap},
        "volumes": {},
        "nodes": {1: {"name": "s1"}, 2: {"name": "s2"}},
        "pools": {},
        "reports": {1: {"snapshots": {}}, 2: {"snapshots": {}}},
        "events": [],
    }


def test_a_snapshot_error_is_kept_while_the_map_wants_the_snapshot() -> None:
    assert error_still_wanted(_st("creating"), "snapshot:snap1", SNAP_ERR)
    assert error_still_wanted(_st("ready"), "snapshot:snap1", SNAP_ERR)


def test_a_snapshot_error_is_forgotten_once_the_map_deletes_the_snapshot() -> None:
    """Seen in the lab: a freeze ran out after the snapshot was taken; its error, kept, was
    reported as a failed snapshot on the primary, and the snapshot's delete (which waits until no
    node reports it) never finished."""
    st = _st("deleting")
    assert not error_still_wanted(st, "snapshot:snap1", SNAP_ERR)
    # what that means for the map: node 1 reports nothing of it any more, node 2 neither: dropped
    settle_snapshot(st, st["snapshots"]["s-1"])
    assert "s-1" not in st["snapshots"]


def test_a_failed_report_alone_keeps_a_deleting_snapshot_in_the_map() -> None:
    """Why the error must go: the map's delete waits for every node's report to drop it."""
    st = _st("deleting")
    st["reports"][1]["snapshots"]["s-1"] = {"state": "failed", "error": SNAP_ERR["error"]}
    settle_snapshot(st, st["snapshots"]["s-1"])
    assert "s-1" in st["snapshots"]


def test_errors_of_objects_gone_or_replaced_are_forgotten() -> None:
    st = _st("ready")
    assert not error_still_wanted(st, "snapshot:snap1", {**SNAP_ERR, "uuid": "s-other"})
    assert not error_still_wanted(st, "snapshot:gone", {**SNAP_ERR})


def test_a_failed_create_is_forgotten_once_the_map_deletes_the_volume() -> None:
    st = _st("ready")
    st["names"]["v"] = {"kind": "volume", "uuid": "v-1"}
    st["volumes"]["v-1"] = {"uuid": "v-1", "name": "v", "state": "creating"}
    err = {"step": "volume.create", "error": "no space", "uuid": "v-1"}
    assert error_still_wanted(st, "volume:v", err)
    st["volumes"]["v-1"]["state"] = "deleting"
    assert not error_still_wanted(st, "volume:v", err)


def test_a_failed_create_is_forgotten_once_the_replica_is_placed_elsewhere() -> None:
    """Level 3: the leader gives the slot of a node that failed to make its replica to another
    node; the failed node must stop reporting that replica failed (nodeos/storage/create_replace_map.py)."""
    st = _st("ready")
    st["names"]["v"] = {"kind": "volume", "uuid": "v-1"}
    vol = {"uuid": "v-1", "name": "v", "state": "creating", "placement": [{"node": 1}, {"node": 2}]}
    st["volumes"]["v-1"] = vol
    err = {"step": "volume.create", "error": "no pool 'p1'", "uuid": "v-1"}
    assert error_still_wanted(st, "volume:v", err, me=1)
    vol["placement"] = [{"node": 3}, {"node": 2}]
    assert not error_still_wanted(st, "volume:v", err, me=1)
    assert error_still_wanted(st, "volume:v", err, me=2)
