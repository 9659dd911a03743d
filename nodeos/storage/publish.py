"""Published volumes (model distribution, issue 13): the pure decisions.

A published volume is an immutable, read-only copy of a snapshot held whole by each of N
nodes; every node exports the same subsystem NQN and namespace ids, ANA optimized, so a
host's native multipath spreads its reads over all of them. There is no primary: the content
never changes, so there is no write path to order.

Decisions here (no I/O, no clock), in the style of placement and the failover controller:
- `parse_replicas`: `N` or `all` (None).
- `choose_nodes`: where the copies go. The snapshot's own nodes first (they hold the bytes
  already: a local thin clone, no copy over the network), its primary first of all (it
  computes the checksum recorded for the volume), then one node per further failure domain,
  most free first; never two in one domain.
- `copy_plan`: who copies from whom. Only a replica that *joined* (holds every byte, its
  sha256 equal to the recorded one) is a source, and each source feeds at most `fanout`
  copies at once, so filling N replicas is a tree (1 -> 2 -> 4 ...) and no node is read N
  times; an assignment stands while its source is still joined and up.
- `joined`: a replica joins the path set (is exported to hosts) only once its reported
  sha256 matches the checksum recorded at publish time.
- `check_unpublish`: refused while hosts are connected, unless forced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeos.errors import BadInput, OperationFailed
from nodeos.storage.placement import SPREADS, NodeCandidate, domain_of

# What a replica node reports of its copy: waiting (no source yet), copying (progress 0..1),
# verifying (reading its own copy back for the checksum), ready (sha256 set), failed (error).
COPY_STATES = ("waiting", "copying", "verifying", "ready", "failed")
DEFAULT_FANOUT = 2  # copies one joined replica feeds at once
MAX_PUBLISH_REPLICAS = 64


def parse_replicas(value: Any, field: str = "replicas") -> int | None:
    """`all` (or None) -> None: every domain with room; else a count >= 1."""
    if value is None or value == "all":
        return None
    n = value
    if isinstance(value, str):
        try:
            n = int(value, 10)
        except ValueError:
            n = None
    if type(n) is not int or not 1 <= n <= MAX_PUBLISH_REPLICAS:
        raise BadInput(
            f"replicas must be a count from 1 to {MAX_PUBLISH_REPLICAS} or 'all', not {value!r}",
            field=field,
            allowed=f"1-{MAX_PUBLISH_REPLICAS} or all",
        )
    return n


def _best_pool(node: NodeCandidate, size: int) -> Any:
    pools = [p for p in node.pools if p.healthy and min(p.free_bytes, p.size_bytes) >= size]
    ordered = sorted(pools, key=lambda p: p.pool_id)  # max keeps the first: lowest id on a tie
    return max(ordered, key=lambda p: min(p.free_bytes, p.size_bytes), default=None)


def choose_nodes(
    cands: Iterable[NodeCandidate],
    seeds: list[dict[str, Any]],
    size: int,
    replicas: int | None,
    spread: str = "node",
) -> list[dict[str, Any]]:
    """Placement of a published volume: [{node, pool_id, seed}], the source (seeds[0]) first.

    `seeds` are the snapshot's slots ({node, pool_id}, its primary first): a copy there is a
    thin clone of the snapshot in the same pool. Seeds whose node is not schedulable are left
    out, except the first, which must be (it records the checksum)."""
    if spread not in SPREADS:
        raise BadInput(f"spread {spread!r} is not allowed", field="spread", allowed=list(SPREADS))
    nodes = {c.node_id: c for c in cands}
    src = nodes.get(seeds[0]["node"]) if seeds else None
    if src is None or not src.schedulable:
        name = src.name if src is not None else f"node {seeds[0]['node'] if seeds else '?'}"
        raise OperationFailed(
            f"the snapshot's primary {name} is not schedulable (down, draining or its data plane "
            "unhealthy): it is the source of the published copies",
            field="snapshot",
        )
    out: list[dict[str, Any]] = []
    used: set[str] = set()
    for s in seeds:
        c = nodes.get(s["node"])
        if c is None or not c.schedulable or domain_of(c, spread) in used:
            continue
        used.add(domain_of(c, spread))
        out.append({"node": c.node_id, "pool_id": s["pool_id"], "seed": True})
    # One node per further domain: in each, its most-free node; domains most free first.
    best: dict[str, tuple[int, int, str]] = {}
    for c in sorted(nodes.values(), key=lambda c: c.node_id):
        d = domain_of(c, spread)
        if not c.schedulable or d in used:
            continue
        p = _best_pool(c, size)
        if p is None:
            continue
        free = min(p.free_bytes, p.size_bytes)
        if d not in best or free > best[d][0]:
            best[d] = (free, c.node_id, p.pool_id)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))
    out += [{"node": nid, "pool_id": pid, "seed": False} for _, (_, nid, pid) in ranked]
    if replicas is None:
        return out
    if replicas > len(out):
        raise BadInput(
            f"{replicas} replicas spread by {spread} need {replicas} {spread}s with a schedulable node "
            f"and {size} bytes free; {len(out)} have",
            field="replicas",
            allowed=f"1-{len(out)} or all",
        )
    return out[:replicas]


def joined(checksum: str | None, report: Mapping[str, Any] | None) -> bool:
    """A replica serves hosts only once it holds every byte: its own sha256 of the whole
    volume equals the one recorded at publish time."""
    return (
        checksum is not None
        and report is not None
        and report.get("state") == "ready"
        and report.get("sha256") == checksum
    )


def copy_plan(
    order: list[int],
    seeds: set[int],
    current: Mapping[int, int],
    joined_nodes: set[int],
    up: set[int],
    fanout: int = DEFAULT_FANOUT,
) -> dict[int, int]:
    """{target: source} for the replicas still to fill.

    `order` is the placement order (deterministic tie-break), `seeds` fill themselves (a local
    clone), `current` the assignments in force, `joined_nodes` the replicas that hold every
    byte (the only sources), `up` the nodes whose health is up. An assignment stands while
    its target still needs it and its source is joined and up; each source feeds at most
    `fanout` targets; targets are served in placement order, each from the least loaded
    source (then the earliest in placement)."""
    if fanout < 1:
        raise BadInput("fanout must be at least 1", field="fanout")
    sources = [n for n in order if n in joined_nodes and n in up]
    load = {n: 0 for n in sources}
    plan: dict[int, int] = {}
    need = [n for n in order if n not in seeds and n not in joined_nodes and n in up]
    for t in need:
        s = current.get(t)
        if s in load and load[s] < fanout:
            plan[t] = s
            load[s] += 1
    for t in need:
        if t in plan:
            continue
        free = [s for s in sources if load[s] < fanout]
        if not free:
            break
        s = min(free, key=lambda n: (load[n], order.index(n)))
        plan[t] = s
        load[s] += 1
    return plan


def check_unpublish(name: str, connected: Mapping[int, list[str]], force: bool) -> None:
    """Refused while any node reports a host connected, or cannot tell and hosts are granted
    (the operator switches hosts to the new version and revokes them first), unless forced."""
    hosts = sorted({h for hs in connected.values() for h in hs})
    if hosts and not force:
        raise OperationFailed(
            f"published volume {name!r} has (or, where the target cannot show connections, may have) "
            f"connected hosts: {', '.join(hosts)}; switch them to another volume and revoke them "
            "first, or use --force",
            field="name",
        )
