"""A drive pulled out of a storage node (or dead on its bus) and one whose SMART says it is
failing, as the leader lives it: the node's report names the drive missing (its pool failed) or
failing; a secondary on that pool is re-placed at once (no grace: the drive is not coming back);
a primary on it is handed off to an in-sync replica on a sound pool first, and its old slot is
then re-placed like any secondary's."""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.storage import failover
from nodeos.storage.replace import ReplacePolicy

from .test_failover import T, apply_all, leases_all_renewing, ready
from .test_storage_map import GiB, M, cluster, create

P = ReplacePolicy(after_s=600.0)
NOW = 10.0
SOUND = {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 99 * GiB}


def drive_report(m: M, nid: int, health: str, uuid: str, **replica: Any) -> None:
    """What node `nid`'s agent reports once drive d1 of its pool is `health`."""
    pool = (
        {"state": "failed", "error": "drive d1 is missing (removed or dead)"}
        if health == "missing"
        else SOUND
    )
    m.report(
        nid,
        drives={"d1": {"serial": "d1", "health": health}},
        pools={f"pool{nid}": pool},
        replicas={uuid: {"state": "in-sync", **replica}},
    )


def sound(m: M, *nodes: int) -> None:
    for n in nodes:
        m.report(n, pools={f"pool{n}": SOUND})


def decide(m: M, nodes: int = 4) -> list[tuple[str, dict[str, Any]]]:
    return failover.decide(m.st, leases_all_renewing(NOW, *range(1, nodes + 1)), NOW, T, P)


def test_a_pulled_drive_under_a_secondary_has_its_replica_re_placed_at_once() -> None:
    m = cluster(4)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    sound(m, 1, 2, 4)
    mark = map_events.last_seq(m.st)
    drive_report(m, 3, "missing", uuid)
    (ev,) = [e for e in map_events.list_events(m.st, mark) if e["kind"] == "drive_failed"]
    assert ev["node"] == 3 and ev["message"] == "drive d1 of node 3 is missing (removed or dead)"
    (cmd,) = decide(m)
    assert cmd[0] == "volume_replace_replica"
    assert (cmd[1]["old"], cmd[1]["node"]) == (3, 4)  # long before the 600 s grace
    assert cmd[1]["reason"] == "drive d1 of pool p on node 3 is missing"


def test_a_pulled_drive_under_the_primary_hands_it_off_then_its_slot_is_re_placed() -> None:
    m = cluster(4)
    uuid = create(m, "v", 1, 2, 3)
    vol = ready(m, uuid, 1, 2, 3)
    sound(m, 2, 3, 4)
    drive_report(m, 1, "missing", uuid, epoch=1)
    # The primary's mirror serves from the remote legs; its own slot cannot be re-placed while
    # it is the primary: a planned move first, to the first in-sync replica on a sound pool.
    assert decide(m) == [("volume_handoff", {"uuid": uuid, "epoch": 1, "to": 2})]
    apply_all(m, decide(m))
    assert decide(m) == []  # until the primary confirms it stopped serving
    drive_report(m, 1, "missing", uuid, epoch=1, handed_off=1)
    (cmd,) = decide(m)
    assert cmd[0] == "volume_failover" and cmd[1]["planned"] and cmd[1]["to"] == 2
    assert cmd[1]["reason"] == "drive d1 of pool p on node 1 is missing"
    apply_all(m, [cmd])
    assert (vol["primary"], vol["epoch"], vol["in_sync"]) == (2, 2, [2, 3])
    # Node 1 now holds a secondary on a pool without its drive: re-placed at once.
    (cmd,) = decide(m)
    assert cmd[0] == "volume_replace_replica" and (cmd[1]["old"], cmd[1]["node"]) == (1, 4)
    apply_all(m, [cmd])
    assert [s["node"] for s in vol["placement"]] == [4, 2, 3] and vol["in_sync"] == [2, 3]


def test_a_failing_drive_under_the_primary_is_evacuated_to_a_replica_on_a_sound_pool() -> None:
    m = cluster(4)
    uuid = create(m, "v", 1, 2, 3)
    ready(m, uuid, 1, 2, 3)
    sound(m, 3, 4)
    drive_report(m, 1, "failing", uuid, epoch=1)  # SMART: critical warning, still serving
    drive_report(m, 2, "failing", uuid)
    assert decide(m) == [("volume_handoff", {"uuid": uuid, "epoch": 1, "to": 3})]  # not node 2


def test_a_troubled_primary_stays_when_no_replica_sits_on_a_sound_pool() -> None:
    m = cluster(3)
    uuid = create(m, "v", 1, 2)
    ready(m, uuid, 1, 2)
    drive_report(m, 1, "failing", uuid, epoch=1)
    drive_report(m, 2, "missing", uuid)
    cmds = decide(m, 3)
    assert [c for c, _ in cmds] == ["volume_replace_replica"]  # only the secondary moves
    assert (cmds[0][1]["old"], cmds[0][1]["node"]) == (2, 3)
