"""Leader-side decisions of the control plane (pure): a validated request and the map in, the
map command to propose out. The leader calls these right after a read barrier; the map's
own handlers check the same preconditions again at apply, so a decision made from a state
that changed meanwhile is refused identically on every node, never half-applied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodeos.control import host_api, publish_api, views
from nodeos.errors import AlreadyExists, BadInput, NotFound, NotSupported, OperationFailed
from nodeos.storage import placement
from nodeos.storage.capacity import candidates  # the leader's view of nodes: placement's input
from nodeos.storage.lookup import name_free, pool_key, snapshot_by_name, volume_by_name
from nodeos.storage.snapshot_map import check_snapshot_allowed

NQN_PREFIX = "nqn.2014-08.io.nodeos:vol:"
Command = tuple[str, dict[str, Any]]


def _node(st: dict[str, Any], ref: Any, field: str = "node") -> int:
    nid = views.node_by_ref(st, ref)
    if nid is None:
        names = sorted(str(n.get("name")) for n in st["nodes"].values())
        raise NotFound(f"node {ref!r} is not a member of this cluster", field=field, allowed=names or None)
    return nid


def place(
    st: dict[str, Any], key: str, size: int, replicas: int, spread: str, pool: str | None
) -> list[dict[str, Any]]:
    cands = candidates(st, net_of_pending=True)
    if not any(c.pools for c in cands):
        raise BadInput("there is no pool in this cluster; create one with `nodeos pool create`", field="pool")
    if pool is not None:
        named = {(p["node"], p["pool_id"]) for p in st["pools"].values() if p["name"] == pool}
        if not named:
            names = sorted({p["name"] for p in st["pools"].values()})
            raise NotFound(f"pool {pool!r} does not exist", field="pool", allowed=names or None)
        cands = [
            placement.NodeCandidate(
                c.node_id,
                c.name,
                c.labels,
                c.schedulable,
                tuple(p for p in c.pools if (p.node_id, p.pool_id) in named),
            )
            for c in cands
        ]
        biggest = max((p.size_bytes for c in cands for p in c.pools), default=0)
        if biggest and size > biggest:
            raise BadInput(
                f"size of {size} bytes is larger than pool {pool!r} ({biggest} bytes)",
                field="size",
                allowed=f"<= {biggest} bytes",
            )
    slots = placement.CapacityIndex(cands).place(key, size, replicas, spread)
    return [{"node": s.node_id, "pool_id": s.pool_id} for s in slots]


def pool_create(st: dict[str, Any], p: dict[str, Any], pool_id: str) -> Command:
    nid = _node(st, p["node"])
    if pool_key(nid, p["name"]) in st["pools"]:
        raise AlreadyExists(f"pool {p['name']!r} already exists on {views.node_name(st, nid)}", field="name")
    args = {
        "node_id": nid,
        "name": p["name"],
        "pool_id": pool_id,
        "drives": p["drives"],
        "devices": p["devices"],
    }
    return "pool_create", args


def volume_create(st: dict[str, Any], p: dict[str, Any], uuid: str) -> Command:
    name_free(st, p["name"])
    slots = place(st, uuid, p["size"], p.get("replicas", 1), p.get("spread", "node"), p.get("pool"))
    args = {
        "uuid": uuid,
        "name": p["name"],
        "nqn": NQN_PREFIX + uuid,
        "size_bytes": p["size"],
        "spread": p.get("spread", "node"),
        "placement": slots,
        "qos_iops": p.get("qos_iops"),
        "qos_mbps": p.get("qos_mbps"),
    }
    return "volume_create", args


def volume_clone(st: dict[str, Any], p: dict[str, Any], uuid: str) -> Command:
    """A clone lives where its snapshot lives (thin clones share the snapshot's blocks), on as
    many of those replicas as asked (default: all of them). A replicated snapshot's replicas
    hold the mirror layout (md superblock, data at an offset): its clones are mirrors too, of
    2 or more legs; more legs than the snapshot has would need a rebuild."""
    snap = snapshot_by_name(st, p["snapshot"])
    if snap["state"] != "ready":
        raise OperationFailed(f"snapshot {snap['name']!r} is {snap['state']}", field="snapshot")
    name_free(st, p["name"])
    have = len(snap["placement"])
    n = p.get("replicas") or have
    allowed = list(range(2 if have > 1 else 1, have + 1))
    if n > have:
        raise BadInput(
            f"snapshot {snap['name']!r} has {have} replica(s); "
            "a clone can have at most that many (more would need a rebuild)",
            field="replicas",
            allowed=allowed,
        )
    if n not in allowed:
        raise BadInput(
            f"snapshot {snap['name']!r} is of a replicated volume: its clone keeps the mirror layout "
            "and needs 2 or more replicas",
            field="replicas",
            allowed=allowed,
        )
    vol = st["volumes"].get(snap["volume"])
    args = {
        "uuid": uuid,
        "name": p["name"],
        "nqn": NQN_PREFIX + uuid,
        "size_bytes": snap["size_bytes"],
        "spread": (vol or {}).get("spread", "node"),
        "placement": [dict(s) for s in snap["placement"][:n]],
        "kind": "clone",
        "origin": snap["name"],
    }
    return "volume_create", args


def volume_resize(st: dict[str, Any], p: dict[str, Any]) -> Command:
    vol = volume_by_name(st, p["name"])
    if vol["state"] != "ready":
        raise OperationFailed(f"volume {p['name']!r} is {vol['state']}", field="name")
    if p["size"] < vol["size_bytes"]:
        raise BadInput(
            f"volume {p['name']!r} is {vol['size_bytes']} bytes; volumes only grow "
            "(shrinking would cut off data)",
            field="size",
            allowed=f">= {vol['size_bytes']} bytes",
        )
    if vol["replicas"] > 1 and p["size"] != vol["size_bytes"]:
        _check_grow(st, vol)
    for slot in vol["placement"]:
        pool = views.pool_of(st, slot["node"], slot["pool_id"])
        cap = int((pool or {}).get("size_bytes") or 0)
        if cap and p["size"] > cap:
            raise BadInput(
                f"size of {p['size']} bytes is larger than pool {pool['name']!r} "  # type: ignore[index]
                f"on {views.node_name(st, slot['node'])}",
                field="size",
                allowed=f"<= {cap} bytes",
            )
    return "volume_resize", {"name": p["name"], "size_bytes": p["size"]}


def _check_grow(st: dict[str, Any], vol: dict[str, Any]) -> None:
    """A replicated volume grows on every replica node (nodeos/agent/grow.py): each one's data
    plane must know how, and no snapshot may hold the mirror's writes meanwhile."""
    if vol.get("freeze"):
        raise OperationFailed(
            f"volume {vol['name']!r} is taking a snapshot; resize it once that is done", field="name"
        )
    cannot = [
        views.node_name(st, s["node"])
        for s in vol["placement"]
        if not ((st["reports"].get(s["node"]) or {}).get("dataplane") or {}).get("mirror_grow")
    ]
    if cannot:
        raise NotSupported(
            f"volume {vol['name']!r} cannot grow: the data plane of {', '.join(cannot)} cannot grow "
            "a replicated volume (the kernel data plane can)",
            field="name",
        )


def volume_delete(st: dict[str, Any], p: dict[str, Any]) -> Command:
    ref = st["names"].get(p["name"])
    if ref is None:
        raise NotFound(f"volume {p['name']!r} does not exist", field="name")
    if ref["kind"] == "snapshot":
        return "snapshot_delete", {"name": p["name"], "force": bool(p.get("force"))}
    if ref["kind"] == "published":
        raise BadInput(
            f"{p['name']!r} is a published volume: remove it with `nodeos volume unpublish`", field="name"
        )
    vol = st["volumes"][ref["uuid"]]
    force = bool(p.get("force"))
    if vol["state"] not in ("ready", "failed") and not force:
        raise OperationFailed(
            f"volume {p['name']!r} is {vol['state']}: an operation is pending; "
            "use --force to delete it anyway",
            field="name",
        )
    if vol["hosts"] and not force:
        # Live connections are not visible on every data plane: a granted host may be connected.
        raise OperationFailed(
            f"volume {p['name']!r} may have connected hosts: it is granted to {', '.join(vol['hosts'])}; "
            "revoke the hosts or use --force",
            field="name",
        )
    return "volume_delete", {"name": p["name"]}


def volume_snapshot(st: dict[str, Any], p: dict[str, Any], uuid: str) -> Command:
    vol = volume_by_name(st, p["name"])
    if vol["state"] != "ready":
        raise OperationFailed(f"volume {p['name']!r} is {vol['state']}", field="name")
    if vol["replicas"] > 1:
        check_snapshot_allowed(st, vol)
    name_free(st, p["snapshot"], "snapshot")
    return "snapshot_create", {"uuid": uuid, "name": p["snapshot"], "volume": p["name"]}


def volume_hosts(st: dict[str, Any], p: dict[str, Any], add: bool) -> Command:
    asked = p["hosts"] if "hosts" in p else [p["host"]]
    for host in asked:
        if host not in st["hosts"]:
            raise NotFound(f"host {host!r} is not registered; add it with `nodeos host add`", field="host")
    who = {"hosts": asked} if "hosts" in p else {"host": p["host"]}
    if (st["names"].get(p["name"]) or {}).get("kind") == "published":
        return publish_api.decide_hosts(st, {"name": p["name"], **who}, add)
    vol = volume_by_name(st, p["name"])
    if vol["state"] != "ready":
        raise OperationFailed(
            f"volume {p['name']!r} is {vol['state']}: an operation is pending (see nodeos status)",
            field="name",
        )
    return "volume_hosts", {"name": p["name"], **who, "add": add}


def node_label(st: dict[str, Any], p: dict[str, Any]) -> Command:
    nid = _node(st, p["node"], "node")
    return "node_label", {"node_id": nid, "set": p.get("set") or {}, "remove": p.get("remove") or []}


def node_drain(st: dict[str, Any], p: dict[str, Any], drain: bool) -> Command:
    nid = _node(st, p["node"], "node")
    return "node_set_state", {"node_id": nid, "state": "draining" if drain else "active"}


def node_rebuild_limit(st: dict[str, Any], p: dict[str, Any]) -> Command:
    nid = _node(st, p["node"], "node")
    return "node_rebuild_limit", {"node_id": nid, "mbps": p.get("mbps")}


WRITES: dict[str, Callable[..., Command]] = {
    "pool.create": pool_create,
    "volume.create": volume_create,
    "volume.clone": volume_clone,
    "volume.snapshot": volume_snapshot,
    "volume.resize": lambda st, p: volume_resize(st, p),
    "volume.delete": lambda st, p: volume_delete(st, p),
    "volume.grant": lambda st, p: volume_hosts(st, p, True),
    "volume.revoke": lambda st, p: volume_hosts(st, p, False),
    "node.label": lambda st, p: node_label(st, p),
    "node.drain": lambda st, p: node_drain(st, p, True),
    "node.undrain": lambda st, p: node_drain(st, p, False),
    "node.rebuild_limit": node_rebuild_limit,
}
WRITES.update(publish_api.WRITES)
NEEDS_ID = {"pool.create", "volume.create", "volume.clone", "volume.snapshot", "volume.publish"}


def pool_delete(st: dict[str, Any], p: dict[str, Any]) -> Command:
    nid = _node(st, p["node"])
    if pool_key(nid, p["name"]) not in st["pools"]:
        raise NotFound(f"pool {p['name']!r} does not exist on {views.node_name(st, nid)}", field="name")
    return "pool_delete", {"node_id": nid, "name": p["name"]}


WRITES["pool.delete"] = pool_delete
WRITES["host.add"] = host_api.decide_host_add
WRITES["host.update"] = host_api.decide_host_update
WRITES["host.remove"] = lambda st, p: ("host_remove", {"nqn": p["nqn"]})
