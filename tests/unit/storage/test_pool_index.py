"""The pool index beside the map (nodeos/storage/pool_index.py): an applied create's room check
reads the volumes of its own pools, and finds what a scan of every volume finds, through
creates, re-placements, deletes, restores and a state put in place; every command is classified,
and the places in the map's code that add a slot to a placement are the ones it follows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nodeos.cluster import map as map_module
from nodeos.cluster.map import HANDLERS, ClusterMap
from nodeos.storage import capacity, pool_index

from .test_failover import ready
from .test_storage_map import GiB, M, cluster, create

# The map's code: its storage sections, and the cluster map that gathers them.
MAP_DIRS = (Path(capacity.__file__).parent, Path(map_module.__file__).parent)


def _pending(m: M, indexed: bool) -> dict[Any, int]:
    """Per pool, asked one pool at a time (as a create's check asks for its own pools only)."""
    out: dict[Any, int] = {}
    token = pool_index.ACTIVE.set((m.st, m.m.pool_index) if indexed else None)
    try:
        for p in m.st["pools"].values():
            out.update(capacity.pending_bytes(m.st, [(p["node"], p["pool_id"])]))
    finally:
        pool_index.ACTIVE.reset(token)
    return out


def _agree(m: M) -> dict[Any, int]:
    scanned = _pending(m, indexed=False)
    assert _pending(m, indexed=True) == scanned
    # Every pool at once, as the leader's placement asks (the index of unlisted volumes).
    with pool_index.using(m.st, m.m.pool_index):
        assert capacity.pending_bytes(m.st) == scanned
    return scanned


def test_the_index_counts_what_a_scan_counts_through_creates_replacements_and_deletes() -> None:
    m = cluster(4)
    a = create(m, "a", 1, 2, 3)
    create(m, "b", 2, 3, 4)
    assert _agree(m) == {(1, "pool1"): GiB, (2, "pool2"): 2 * GiB, (3, "pool3"): 2 * GiB, (4, "pool4"): GiB}
    ready(m, a, 1, 2, 3)  # every node reports a: only b is still promised
    assert _agree(m) == {(2, "pool2"): GiB, (3, "pool3"): GiB, (4, "pool4"): GiB}
    m.ok("node_health", node_id=2, health="down", reason="lease ran out")
    m.ok("volume_replace_replica", uuid=a, epoch=1, old=2, node=4, pool_id="pool4", reason="test")
    assert _agree(m)[(4, "pool4")] == 2 * GiB, "a's new slot on pool4 is promised until node 4 reports it"
    m.ok("volume_delete", name="b")
    _agree(m)
    # A node whose report stops listing a volume placed on it (its replica lost): promised again.
    m.report(1, pools={"pool1": {"state": "ready", "size_bytes": 100 * GiB}}, replicas={})
    assert _agree(m)[(1, "pool1")] == GiB
    # Restored from a snapshot, and a state put in place of the old one: the index follows.
    m.m.restore(m.m.snapshot(), m.i)
    _agree(m)
    m.m.state = ClusterMap().state
    assert _pending(m, indexed=True) == {} == _pending(m, indexed=False)


def test_an_applied_create_is_refused_by_the_index_as_by_a_scan() -> None:
    m = cluster(1)
    m.report(1, pools={"pool1": {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 3 * GiB}})
    create(m, "a", 1)
    out = m.do(
        "volume_create",
        uuid="u-b",
        name="b",
        nqn="n",
        size_bytes=3 * GiB,
        placement=[{"node": 1, "pool_id": "pool1"}],
    )
    assert (
        out["error"]["code"] == "placement_refused" and "1 GiB of it promised" in out["error"]["message"]
    ), out


def test_every_command_is_classified_and_the_rest_rebuild() -> None:
    unclassified = set(HANDLERS) - pool_index.KEEPS - pool_index.PLACING
    assert unclassified == {"import_node", "init_cluster"}, (
        "a new map command: put it in pool_index.KEEPS if it adds no slot to any volume's placement, "
        "in PLACING if it adds one to the volume its `uuid` names; until then it rebuilds the index"
    )
    idx = pool_index.PoolIndex()
    m = cluster(1)
    idx.volumes_on(m.st, (1, "pool1"))
    idx.after(m.st, "a_command_from_later", {})
    assert idx._by_ref is None


# Where the map's code writes a placement or puts a volume in the table: each is a command in
# PLACING (or import_node, which rebuilds). A new one fails here until the index follows it.
PLACEMENT_WRITES = {
    ("create_replace_map.py", 'vol["placement"] = placement'),
    ("replace_map.py", 'vol["placement"] = placement'),
    ("storage_map.py", 'st["volumes"][uuid] = vol'),
    ("storage_import.py", 'st["volumes"][vol["uuid"]] = vol'),
}
WRITE = re.compile(r'(\w+\["placement"\]\s*=[^=].*|st\["volumes"\]\[.+?\]\s*=[^=].*)')


def test_the_placement_writes_in_the_map_code_are_the_known_ones() -> None:
    found = set()
    for path in sorted(p for d in MAP_DIRS for p in d.glob("*.py")):
        for line in path.read_text().splitlines():
            hit = WRITE.search(line)
            if hit:
                found.add((path.name, hit.group(1).strip()))
    assert found == PLACEMENT_WRITES
