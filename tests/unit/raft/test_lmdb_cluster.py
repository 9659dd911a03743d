"""Three RawNodes on real LMDB storage: replicate, compact, restart everything from disk."""

from __future__ import annotations

from pathlib import Path

from nodeos.cluster.raft import MessageType
from nodeos.cluster.raft_storage import LmdbRaftStorage

from .harness import Cluster


def test_cluster_on_lmdb_survives_full_restart_and_ships_snapshot(tmp_path: Path) -> None:
    def open_storage(i: int) -> LmdbRaftStorage:
        return LmdbRaftStorage.open(tmp_path / f"n{i}")

    c = Cluster([1, 2, 3], storage=open_storage)
    c.elect(1)
    c.isolate(3)
    for k in range(20):
        c.propose(1, b"cmd%d" % k)
    leader = c.members[1]
    applied = c.raft(1).log.applied
    leader.storage.create_snapshot(applied, leader.conf, b"snapshot-of-20")
    leader.storage.compact(applied - 1)
    # Power loss: every process dies; LMDB environments are reopened from disk.
    for i in (1, 2, 3):
        c.members[i].storage.close()  # type: ignore[attr-defined]
        c.restart(i, open_storage(i))
    assert c.members[1].storage.last_index() == applied
    assert c.members[2].storage.initial_state()[0].commit == applied
    c.heal()
    c.elect(1)  # the node whose log is compacted
    c.propose(1, b"after-restart")
    c.tick(3)
    assert c.sent_of(MessageType.SNAP)  # node 3 was too far behind the compacted log
    assert c.members[3].storage.snapshot().data == b"snapshot-of-20"
    for i in (1, 2, 3):
        assert c.members[i].applied[-1] == b"after-restart"
        c.members[i].storage.close()  # type: ignore[attr-defined]
