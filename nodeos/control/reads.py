"""Reads of the control API, run at the leader after its read barrier: pure views of the map."""

from __future__ import annotations

from typing import Any

from nodeos.control import publish_api, views
from nodeos.errors import NotFound


def volume_show(st: dict[str, Any], p: dict[str, Any], d: Any) -> dict[str, Any]:
    name = p.get("name")
    ref = st["names"].get(name)
    if ref is None:
        raise NotFound(f"volume {name!r} does not exist", field="name")
    if ref["kind"] == "snapshot":
        return views.snapshot_view(st, st["snapshots"][ref["uuid"]])
    if ref["kind"] == "published":
        return publish_api.published_view(st, st["published"][ref["uuid"]])
    return views.volume_view(st, st["volumes"][ref["uuid"]])


def raft_roles(d: Any) -> dict[int, str]:
    cs = d.conf_state
    return {**{n: "learner" for n in cs.learners}, **{n: "voter" for n in cs.voters}}


def node_list(st: dict[str, Any], p: dict[str, Any], d: Any) -> list[dict[str, Any]]:
    roles = raft_roles(d)
    out = []
    for nid in sorted(st["nodes"]):
        v = views.node_view(st, nid, roles)
        v["leader"] = nid == d.id
        out.append(v)
    return out


def node_show(st: dict[str, Any], p: dict[str, Any], d: Any) -> dict[str, Any]:
    nid = views.node_by_ref(st, p.get("node"))
    if nid is None:
        names = sorted(str(n.get("name")) for n in st["nodes"].values())
        raise NotFound(f"node {p.get('node')!r} is not a member of this cluster", field="node", allowed=names)
    v = views.node_view(st, nid, raft_roles(d))
    v["leader"] = nid == d.id
    rep = st["reports"].get(nid) or {}
    v["drive_list"] = [dict(x, id=k) for k, x in sorted((rep.get("drives") or {}).items())]
    v["pool_list"] = [views.pool_view(st, p) for p in st["pools"].values() if p["node"] == nid]
    return v


READS: dict[str, Any] = {
    "volume.list": lambda st, p, d: sorted(
        views.volume_rows(st) + publish_api.published_rows(st), key=lambda r: r["name"]
    ),
    "volume.show": volume_show,
    "pool.list": lambda st, p, d: sorted(
        (views.pool_view(st, x) for x in st["pools"].values()), key=lambda r: (r["node"], r["name"])
    ),
    "host.list": lambda st, p, d: views.host_rows(st),
    "node.list": node_list,
    "node.show": node_show,
}
