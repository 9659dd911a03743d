"""Which volumes each pool holds, kept beside the map: derived from it, never replicated.

A volume create's room check (capacity.check_room, at every apply on every node) needs, for each
pool of the new volume, the volumes placed there that the pool's node has not reported yet.
Scanning every volume for that made one create cost 255 ms at 100,000 volumes (issue 30,
docs/benchmarks.md, "Cluster map at scale"); with the index it reads the volumes of those pools.

Right by construction where a placement grows, lazily everywhere else:
- a slot is added to a volume's placement only by the commands in PLACING (the places in the
  map's code that write a placement are pinned by tests/unit/cluster/test_pool_index.py); after
  one, the index reads that volume again;
- a slot removed or a volume dropped: the index may still name it, so every entry is checked
  against the map when read, and the stale ones are dropped then;
- any other command not in KEEPS (import_node, a command added later), a restored snapshot, a
  state put in place of the old one: the index is rebuilt from the map on its next use.

`ACTIVE` hands the index of the map being applied to the room check without changing the
handlers' (state, args) shape; a check outside an apply (the simulator's invariants, the
leader's placement) scans the map as before.
"""

from __future__ import annotations

import contextvars
from typing import Any

PoolRef = tuple[int, str]  # (node id, pool id)

PLACING = frozenset({"volume_create", "volume_replace_replica", "volume_create_replace"})
# Commands that add no slot to any volume's placement (they may remove one: read-time pruning).
KEEPS = frozenset(
    {
        "add_node", "ca_roll", "cluster_set", "host_add", "host_remove", "host_seal", "host_update", "kv_cas",
        "kv_delete", "kv_get", "kv_put", "node_health", "node_label", "node_rebuild_limit", "node_report",
        "node_set_state", "node_update", "pool_create", "pool_delete", "publish_hosts", "publish_replace",
        "record_event", "remove_node", "secret_roll", "set_failure_domain", "set_feature_level",
        "snapshot_abort", "snapshot_create", "snapshot_delete", "use_join_token", "volume_create_fail",
        "volume_delete", "volume_failover", "volume_handoff", "volume_hosts", "volume_publish",
        "volume_resize", "volume_unpublish",
    }
)  # fmt: skip


class PoolIndex:
    def __init__(self) -> None:
        self._by_ref: dict[PoolRef, set[str]] | None = None  # None: rebuild on next use
        self._of: dict[str, set[PoolRef]] = {}
        self._volumes_id = 0  # id() of the volumes table it was built from

    def invalidate(self) -> None:
        self._by_ref = None

    def after(self, st: dict[str, Any], cmd: str, args: dict[str, Any]) -> None:
        """Follow one applied command (not called for a refused one: it changed nothing)."""
        if self._by_ref is None or cmd in KEEPS:
            return
        uuid = args.get("uuid")
        if cmd in PLACING and isinstance(uuid, str) and uuid in st["volumes"]:
            self._read(st["volumes"][uuid])
        else:
            self.invalidate()

    def volumes_on(self, st: dict[str, Any], ref: PoolRef) -> list[dict[str, Any]]:
        """The volumes whose placement names pool `ref`, in uuid order."""
        by_ref = self._ready(st)
        out = []
        for uuid in sorted(by_ref.get(ref, ())):
            vol = st["volumes"].get(uuid)
            if vol is not None and any((s["node"], s["pool_id"]) == ref for s in vol["placement"]):
                out.append(vol)
            else:
                self._forget(uuid, ref)
        return out

    def _ready(self, st: dict[str, Any]) -> dict[PoolRef, set[str]]:
        if self._by_ref is None or self._volumes_id != id(st["volumes"]):
            self._by_ref, self._of, self._volumes_id = {}, {}, id(st["volumes"])
            for vol in st["volumes"].values():
                self._read(vol)
        return self._by_ref

    def _read(self, vol: dict[str, Any]) -> None:
        assert self._by_ref is not None
        uuid = vol["uuid"]
        for ref in {(s["node"], s["pool_id"]) for s in vol["placement"]} - self._of.get(uuid, set()):
            self._by_ref.setdefault(ref, set()).add(uuid)
            self._of.setdefault(uuid, set()).add(ref)

    def _forget(self, uuid: str, ref: PoolRef) -> None:
        assert self._by_ref is not None
        self._by_ref.get(ref, set()).discard(uuid)
        self._of.get(uuid, set()).discard(ref)


# (the state being applied, its map's index), set by ClusterMap.apply around the handler.
ACTIVE: contextvars.ContextVar[tuple[dict[str, Any], PoolIndex] | None] = contextvars.ContextVar(
    "pool_index", default=None
)


def active_for(st: dict[str, Any]) -> PoolIndex | None:
    """The index of the map whose apply is running on `st`, if any."""
    cur = ACTIVE.get()
    return cur[1] if cur is not None and cur[0] is st else None
