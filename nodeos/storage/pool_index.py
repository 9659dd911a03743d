"""Which volumes each pool holds, kept beside the map: derived from it, never replicated.

A volume create's room check (capacity.check_room, at every apply on every node) needs, for each
pool of the new volume, the volumes placed there that the pool's node has not reported yet.
Scanning every volume for that made one create cost 255 ms at 100,000 volumes (issue 30,
docs/benchmarks.md, "Cluster map at scale"); with the index it reads the volumes of those pools.

Right by construction where a placement grows, lazily everywhere else:
- a slot is added to a volume's placement only by the commands in PLACING (the places in the
  map's code that write a placement are pinned by tests/unit/storage/test_pool_index.py); after
  one, the index reads that volume again;
- a slot removed or a volume dropped: the index may still name it, so every entry is checked
  against the map when read, and the stale ones are dropped then;
- any other command not in KEEPS (import_node, a command added later), a restored snapshot, a
  state put in place of the old one: the index is rebuilt from the map on its next use.

Beside it, per node, the volumes placed there that its report may not list yet (`unlisted`): the
leader's placement nets every pool's free space of them (capacity.candidates), which scanned
every volume per create. A superset, checked when read: an entry is added wherever a volume can
become unlisted (a placement grows: PLACING; the node's report changes: `node_report`, which
reads that node's volumes again; a rebuild), and dropped when read if the volume is gone, left
the node or is listed now.

`ACTIVE` hands the index of the map being applied to the room check without changing the
handlers' (state, args) shape; `using` hands it to the leader's decisions the same way; a check
outside both (the simulator's invariants) scans the map as before.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
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
        "volume_resize", "volume_unpublish", "upgrade_start", "upgrade_step", "upgrade_state",
    }
)  # fmt: skip


class PoolIndex:
    def __init__(self) -> None:
        self._by_ref: dict[PoolRef, set[str]] | None = None  # None: rebuild on next use
        self._of: dict[str, set[PoolRef]] = {}
        self._unlisted: dict[int, set[str]] = {}  # node -> volumes placed there its report may not list
        self._refs: dict[int, set[PoolRef]] = {}  # node -> its pools that hold a volume (or held one)
        self._volumes_id = 0  # id() of the volumes table it was built from

    def invalidate(self) -> None:
        self._by_ref = None

    def after(self, st: dict[str, Any], cmd: str, args: dict[str, Any]) -> None:
        """Follow one applied command (not called for a refused one: it changed nothing)."""
        if self._by_ref is None:
            return
        if cmd == "node_report":
            self._relist(st, args.get("node_id"))
        if cmd in KEEPS:
            return
        uuid = args.get("uuid")
        if cmd in PLACING and isinstance(uuid, str) and uuid in st["volumes"]:
            self._read(st["volumes"][uuid], st)
        else:
            self.invalidate()

    def pending(self, st: dict[str, Any]) -> dict[PoolRef, int]:
        """Per pool, the bytes of the volumes placed on it that its node's report does not list
        yet (capacity.pending_bytes over every pool), from the unlisted volumes only."""
        self._ready(st)
        out: dict[PoolRef, int] = {}
        for nid, uuids in self._unlisted.items():
            listed = (st["reports"].get(nid) or {}).get("replicas") or {}
            for uuid in sorted(uuids):
                vol = st["volumes"].get(uuid)
                slots = [] if vol is None else [s for s in vol["placement"] if s["node"] == nid]
                if vol is None or not slots or uuid in listed:
                    uuids.discard(uuid)
                    continue
                if vol["state"] == "deleting":
                    continue
                for slot in slots:
                    ref = (nid, slot["pool_id"])
                    out[ref] = out.get(ref, 0) + int(vol["size_bytes"])
        return out

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
            self._unlisted, self._refs = {}, {}
            for vol in st["volumes"].values():
                self._read(vol, st)
        return self._by_ref

    def _read(self, vol: dict[str, Any], st: dict[str, Any]) -> None:
        assert self._by_ref is not None
        uuid = vol["uuid"]
        for ref in {(s["node"], s["pool_id"]) for s in vol["placement"]} - self._of.get(uuid, set()):
            self._by_ref.setdefault(ref, set()).add(uuid)
            self._of.setdefault(uuid, set()).add(ref)
            self._refs.setdefault(ref[0], set()).add(ref)
        for s in vol["placement"]:
            if uuid not in ((st["reports"].get(s["node"]) or {}).get("replicas") or {}):
                self._unlisted.setdefault(s["node"], set()).add(uuid)

    def _relist(self, st: dict[str, Any], nid: Any) -> None:
        """Node `nid` reported: which of the volumes placed on it its report does not list."""
        assert self._by_ref is not None
        listed = (st["reports"].get(nid) or {}).get("replicas") or {}
        unlisted = set()
        for ref in sorted(self._refs.get(nid, ())):
            unlisted.update(v["uuid"] for v in self.volumes_on(st, ref) if v["uuid"] not in listed)
        self._unlisted[nid] = unlisted

    def _forget(self, uuid: str, ref: PoolRef) -> None:
        assert self._by_ref is not None
        self._by_ref.get(ref, set()).discard(uuid)
        self._of.get(uuid, set()).discard(ref)


# (the state being applied, its map's index), set by ClusterMap.apply around the handler.
ACTIVE: contextvars.ContextVar[tuple[dict[str, Any], PoolIndex] | None] = contextvars.ContextVar(
    "pool_index", default=None
)


@contextlib.contextmanager
def using(st: dict[str, Any], index: PoolIndex) -> Iterator[None]:
    """The leader's decisions on `st` read `index` (the map's own: ClusterMap.pool_index)."""
    token = ACTIVE.set((st, index))
    try:
        yield
    finally:
        ACTIVE.reset(token)


def deciding_on(cmap: Any) -> contextlib.AbstractContextManager[None]:
    """`using` the index of ClusterMap `cmap`, around a leader's decision on `cmap.state`."""
    index = getattr(cmap, "pool_index", None)
    return using(cmap.state, index) if isinstance(index, PoolIndex) else contextlib.nullcontext()


def active_for(st: dict[str, Any]) -> PoolIndex | None:
    """The index of the map whose apply is running on `st`, if any."""
    cur = ACTIVE.get()
    return cur[1] if cur is not None and cur[0] is st else None
