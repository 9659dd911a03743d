"""Replica placement: which nodes and pools get a volume's 1-3 replicas (pure code).

Interface (the leader's controller calls it; nothing here does I/O, reads a clock or a
random source):

    index = CapacityIndex(nodes)              # NodeCandidate objects, built once, O(n log n)
    slots = index.place(key, size_bytes, replicas, spread="node",
                        exclude_nodes=(), avoid_domains_of=())   # -> tuple[ReplicaSlot, ...]
    index.reserve(slots, size_bytes)          # once the placement is committed
    index.release(slots, size_bytes)          # the volume was deleted
    index.update_node(node)                   # a node's report, labels or state changed
    index.remove_node(node_id)                # the node left the map

Rules:
- Failure domains at the level the operator picks (`SPREADS`): `node` = the node id;
  `rack` / `switch` = the value of that label on the node. A node without the label is a
  domain of its own at that level, named `node:<name>`.
- A replica needs a schedulable node (not draining, down, a witness, or with an unhealthy
  data plane) with a healthy pool whose free space is >= the volume size and whose size is
  >= the volume size (a pool's usable space is min(free, size); thin pools: free as reported).
- Replicas go on distinct domains, hence on distinct nodes (a node is in exactly one domain
  per level). `exclude_nodes` never get a replica; `avoid_domains_of` are nodes whose domains
  (at the chosen level) must not get one (a rebuild passes the surviving replicas' nodes).
- Choice: greedy most-free ("water filling"). Domains rank by the usable space of their
  most-free node, then by their total usable space (sum over their nodes' most-free pools),
  then by name; the replicas go to the first `replicas` domains that can take the volume, in
  each to the most-free node (ties: lowest node id) and its most-free pool (ties: lowest pool
  id). Nothing depends on input order, so the same index gives the same answer. Each reserve
  lowers the chosen pools, so nodes fill towards the same level, and a run of equal volumes
  on equal nodes visits every domain and every node before reusing one. The first slot
  returned is the most free.
  This is exact: it refuses only when fewer than `replicas` domains hold a node that can take
  the volume, which is exactly when no valid placement exists (domains are disjoint).
  Known trade-off: an empty node that joins a full cluster gets a replica of most new volumes
  until it has caught up (it is the most free); capacity-weighted random choice would smear
  that, at the price of exactness and speed.
- `key` (the volume uuid) does not steer the choice: greedy with identity ties is already
  deterministic for a given index. It stays in the signature (the brief's interface) so a
  key-seeded rule can replace this one without touching callers.
- A refusal is `PlacementRefused` (a BadInput: nothing changed) whose message says what was
  needed and which domains qualify, e.g.
  "3 replicas spread by rack need 3 racks with ≥ 100 GiB free; 2 have: a, b".

Speed (`levels.py`): per level, a heap of domains and per domain a heap of its nodes, kept
lazily, so a placement touches a few heap tops, never the whole map; a level's heaps are
built the first time it is used. The refusal text (`refusal.py`) is the one place that scans
every node (refusals are rare).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from nodeos.errors import BadInput
from nodeos.storage.placement.levels import LabelLevel, NodeLevel
from nodeos.storage.placement.model import (
    MAX_REPLICAS,
    SPREADS,
    NodeCandidate,
    PlacementRefused,
    PoolCandidate,
    ReplicaSlot,
    human_size,
)
from nodeos.storage.placement.refusal import refusal


class _Pool:
    """Mutable capacity of one pool inside the index."""

    __slots__ = ("free", "healthy", "node_id", "pool_id", "schedulable", "size", "slot", "use")

    def __init__(self, node: NodeCandidate, p: PoolCandidate) -> None:
        self.node_id = node.node_id
        self.schedulable = node.schedulable  # the node's, copied here for the reserve hot path
        self.pool_id = p.pool_id
        self.size = p.size_bytes
        self.free = p.free_bytes
        self.healthy = p.healthy
        self.use = self.usable()  # kept up to date with free: the hot path reads it
        self.slot = ReplicaSlot(node.node_id, p.pool_id)  # one shared, immutable slot per pool

    def usable(self) -> int:
        """What a replica may take here: min(free, size), or -1 if the pool may take none."""
        return min(self.free, self.size) if self.healthy and self.schedulable else -1


class CapacityIndex:
    """Free capacity of every candidate pool, indexed per failure-domain level (see module doc)."""

    def __init__(self, nodes: Iterable[NodeCandidate]) -> None:
        self._nodes: dict[int, NodeCandidate] = {}
        self._pools: dict[int, list[_Pool]] = {}
        self._pool_at: dict[tuple[int, str], _Pool] = {}  # looked up by ReplicaSlot too
        self._usable: dict[int, int] = {}  # node id -> its best pool's usable bytes, -1 if none
        self._best_pool: dict[int, _Pool | None] = {}  # node id -> its most-free usable pool
        self._levels: dict[str, NodeLevel | LabelLevel] = {}  # built on first use
        self._label_levels: list[LabelLevel] = []  # the ones that keep per-domain totals
        for node in nodes:
            if node.node_id in self._nodes:
                raise BadInput(f"node id {node.node_id} appears twice", field="nodes")
            self._load(node)

    # --- queries ---------------------------------------------------------------------------

    def place(
        self,
        key: str,
        size_bytes: int,
        replicas: int,
        spread: str = "node",
        exclude_nodes: Collection[int] = (),
        avoid_domains_of: Collection[int] = (),
        reserve: bool = False,
    ) -> tuple[ReplicaSlot, ...]:
        """Choose `replicas` slots on distinct domains at `spread`, most free first.

        Changes nothing unless `reserve`: reserve() the slots once the placement is committed,
        or pass reserve=True to take the space at once (what a leader does for placements in
        flight, so they do not collide; release() them if the commit fails).
        """
        if type(replicas) is not int or not 1 <= replicas <= MAX_REPLICAS:
            raise BadInput(
                f"replicas must be 1, 2 or 3, not {replicas!r}",
                field="replicas",
                allowed=list(range(1, MAX_REPLICAS + 1)),
            )
        if spread not in SPREADS:
            raise BadInput(
                f"spread must be one of {', '.join(SPREADS)}, not {spread!r}",
                field="spread",
                allowed=list(SPREADS),
            )
        if type(size_bytes) is not int or size_bytes <= 0:
            raise BadInput(f"size must be a positive number of bytes, not {size_bytes!r}", field="size")
        level = self._levels.get(spread) or self._activate(spread)
        chosen = level.select(size_bytes, replicas, exclude_nodes, avoid_domains_of)
        if len(chosen) < replicas:
            views = [
                (n, [(p.pool_id, min(p.free, p.size), p.healthy) for p in self._pools[nid]])
                for nid, n in self._nodes.items()
            ]
            raise refusal(views, size_bytes, replicas, spread, set(exclude_nodes), set(avoid_domains_of))
        best = self._best_pool
        pools: list[_Pool] = [best[nid] for nid in chosen]  # type: ignore[misc]
        if reserve:
            self._take(pools, size_bytes)  # chosen: each fits, each on its own node
        return tuple([p.slot for p in pools])

    def free_bytes(self, slot: ReplicaSlot) -> int:
        """The pool's free bytes as the index counts them (reported free minus reservations)."""
        p = self._pool_at.get(slot)
        if p is None:
            raise BadInput(f"no pool {slot.pool_id!r} on node {slot.node_id}", field="slot")
        return p.free

    # --- updates ---------------------------------------------------------------------------

    def reserve(self, slots: Iterable[ReplicaSlot], size_bytes: int) -> None:
        """Take size_bytes from each slot's pool; refused (nothing changed) if one lacks the space."""
        slots = tuple(slots)
        pools = [self._pool_at.get(s) for s in slots]
        if None in pools:
            s = slots[pools.index(None)]
            raise BadInput(f"no pool {s[1]!r} on node {s[0]} to reserve on", field="slots")
        if len(pools) > 1 and len(set(map(id, pools))) != len(pools):
            self._check_sums(pools, size_bytes)  # a pool named twice must hold both
        for p in pools:
            if p.free < size_bytes or p.size < size_bytes:
                raise self._no_room(p, size_bytes)
        self._take(pools, size_bytes)

    def _take(self, pools: list[_Pool], size_bytes: int) -> None:
        """Take the space (checked by the caller). Lower only: every heap entry stays at or
        above the truth, so nothing is pushed. _rescore inlined: this is the hot path."""
        usable, best_pool, all_pools, levels = self._usable, self._best_pool, self._pools, self._label_levels
        for p in pools:
            p.free -= size_bytes
            if p.use < 0:
                continue  # a pool that may take nothing counts for nothing: no score changes
            p.use = p.free if p.free < p.size else p.size
            nid = p.node_id
            if best_pool[nid] is not p:
                continue  # not the node's most-free pool, and it only shrank: no score changes
            best, u = None, -1
            for q in all_pools[nid]:
                if q.use > u:
                    best, u = q, q.use
            old = usable[nid]
            usable[nid] = u
            best_pool[nid] = best
            if delta := (u if u > 0 else 0) - (old if old > 0 else 0):
                for level in levels:
                    level.total[level.dom_of[nid]] += delta

    def _check_sums(self, pools: list[_Pool], size_bytes: int) -> None:
        need: dict[int, int] = {}
        for p in pools:
            need[id(p)] = need.get(id(p), 0) + size_bytes
            if min(p.free, p.size) < need[id(p)]:
                raise self._no_room(p, need[id(p)])

    @staticmethod
    def _no_room(p: _Pool, n: int) -> PlacementRefused:
        return PlacementRefused(
            f"pool {p.pool_id} on node {p.node_id} has {human_size(max(min(p.free, p.size), 0))} free; "
            f"cannot reserve {human_size(n)}",
            field="size",
        )

    def release(self, slots: Iterable[ReplicaSlot], size_bytes: int) -> None:
        """Give size_bytes back to each slot's pool (capped at its size); unknown pools are skipped."""
        for s in slots:
            p = self._pool_at.get(s)
            if p is None:
                continue  # the node or pool left the map: nothing to give back to
            p.free = min(p.free + size_bytes, p.size)
            self._rescore(s.node_id)  # recomputes p.use
            for level in self._levels.values():
                level.raised(s.node_id)

    def update_node(self, node: NodeCandidate) -> None:
        """Replace everything the index knows about the node (a new node is added).

        The free figures given replace the index's own: pass them net of reservations the
        node's report does not reflect yet.
        """
        self._drop_pools(node.node_id)
        self._load(node)
        for level in self._levels.values():
            level.moved(node.node_id, node)
            level.raised(node.node_id)

    def remove_node(self, node_id: int) -> None:
        if node_id not in self._nodes:
            return
        self._drop_pools(node_id)
        self._pools[node_id] = []
        self._rescore(node_id)  # its contribution to domain totals goes
        del self._nodes[node_id], self._pools[node_id], self._usable[node_id], self._best_pool[node_id]
        for level in self._levels.values():
            level.removed(node_id)

    # --- internals -------------------------------------------------------------------------

    def _load(self, node: NodeCandidate) -> None:
        pools = []
        for pc in sorted(node.pools, key=lambda p: p.pool_id):
            if pc.node_id != node.node_id:
                raise BadInput(
                    f"pool {pc.pool_id!r} of node {node.node_id} names node {pc.node_id}", field="pools"
                )
            if pools and pools[-1].pool_id == pc.pool_id:
                raise BadInput(f"pool {pc.pool_id!r} appears twice on node {node.node_id}", field="pools")
            pools.append(_Pool(node, pc))
        self._nodes[node.node_id] = node
        self._pools[node.node_id] = pools
        for p in pools:
            self._pool_at[(node.node_id, p.pool_id)] = p
        self._rescore(node.node_id)

    def _drop_pools(self, node_id: int) -> None:
        for p in self._pools.pop(node_id, ()):
            del self._pool_at[(node_id, p.pool_id)]

    def _rescore(self, node_id: int) -> None:
        """Recompute the node's usable bytes (its most-free healthy pool; ties: lowest pool id)
        and pass the change on to the per-domain totals. On the reserve hot path: kept lean."""
        best = None
        u = -1
        for p in self._pools[node_id]:
            p.use = p.usable()
            if p.use > u:
                best, u = p, p.use
        usable = self._usable
        old = usable.get(node_id, -1)
        usable[node_id] = u
        self._best_pool[node_id] = best
        delta = (u if u > 0 else 0) - (old if old > 0 else 0)
        if delta:
            for level in self._label_levels:
                d = level.dom_of.get(node_id)
                if d is not None:
                    level.total[d] += delta

    def _activate(self, spread: str) -> NodeLevel | LabelLevel:
        level: NodeLevel | LabelLevel
        if spread == "node":
            level = NodeLevel(self._usable)
        else:
            level = LabelLevel(spread, self._usable, self._nodes)
            self._label_levels.append(level)
        self._levels[spread] = level
        return level
