"""The control API of published volumes (issue 13): validate at the console's node, decide at
the leader (pure, from the map), wait on this node's own map. A collaborator of the control
service: `ControlService.methods()` takes `PublishApi(service).methods()`."""

from __future__ import annotations

import logging
from typing import Any

from nodeos.control import views
from nodeos.control.params import wait_param
from nodeos.errors import AlreadyExists, NotSupported, OperationFailed
from nodeos.storage import publish
from nodeos.storage.capacity import candidates
from nodeos.storage.lookup import published_by_name, snapshot_by_name
from nodeos.storage.lookup import published_section as section
from nodeos.storage.publish_map import connected_hosts

LOG = logging.getLogger("nodeosd.control")
NQN_PREFIX = "nqn.2014-08.io.nodeos:vol:"
Command = tuple[str, dict[str, Any]]


# --- decisions at the leader (pure) ------------------------------------------------------------


def decide_publish(st: dict[str, Any], p: dict[str, Any], uuid: str) -> Command:
    snap = snapshot_by_name(st, p["snapshot"], "snapshot")
    if snap["state"] != "ready":
        raise OperationFailed(f"snapshot {snap['name']!r} is {snap['state']}", field="snapshot")
    if p["name"] in st["names"]:
        raise AlreadyExists(f"a volume or snapshot named {p['name']!r} already exists", field="name")
    seeds = sorted(snap["placement"], key=lambda s: s["node"] != snap["primary"])
    slots = publish.choose_nodes(candidates(st), seeds, snap["size_bytes"], p.get("replicas"), p["spread"])
    for s in slots:
        dp = ((st["reports"].get(s["node"]) or {}).get("dataplane") or {}).get("name")
        if dp != "kernel":
            raise NotSupported(
                f"published volumes need the kernel data plane (read-only dm views, nvmet); "
                f"node {views.node_name(st, s['node'])} runs {dp}",
                field="dataplane",
            )
    args = {"uuid": uuid, "name": p["name"], "nqn": NQN_PREFIX + uuid, "snapshot": snap["name"]}
    return "volume_publish", {**args, "placement": slots}


def decide_unpublish(st: dict[str, Any], p: dict[str, Any]) -> Command:
    pub = published_by_name(st, p["name"])
    publish.check_unpublish(pub["name"], connected_hosts(st, pub), bool(p.get("force")))
    return "volume_unpublish", {"name": pub["name"], "force": bool(p.get("force"))}


def decide_hosts(st: dict[str, Any], p: dict[str, Any], add: bool) -> Command:
    published_by_name(st, p["name"])
    who = {"hosts": p["hosts"]} if "hosts" in p else {"host": p["host"]}
    return "publish_hosts", {"name": p["name"], **who, "add": add}


def grants_applied(st: dict[str, Any], name: str) -> bool | None:
    """A grant is in force once every serving replica's export carries it."""
    pub = published_by_name(st, name)
    want = sorted(pub["hosts"])
    for n in st["paths"].get(pub["uuid"]) or {}:
        r = ((st["reports"].get(n) or {}).get("published") or {}).get(pub["uuid"]) or {}
        if sorted(r.get("hosts") or []) != want:
            return None
    return True


# --- views ---------------------------------------------------------------------------------------


def published_view(st: dict[str, Any], pub: dict[str, Any]) -> dict[str, Any]:
    paths = st["paths"].get(pub["uuid"]) or {}
    replicas = []
    for s in pub["placement"]:
        r = ((st["reports"].get(s["node"]) or {}).get("published") or {}).get(pub["uuid"]) or {}
        src = pub["copy_from"].get(s["node"])
        replicas.append(
            {
                "node": views.node_name(st, s["node"]),
                "node_id": s["node"],
                "pool": (views.pool_of(st, s["node"], s["pool_id"]) or {}).get("name"),
                "seed": s["seed"],
                "state": r.get("state", "waiting"),
                "progress": r.get("progress"),
                "resumed": r.get("resumed"),
                "copy_from": views.node_name(st, src) if src is not None else None,
                "sha256": r.get("sha256"),
                "error": r.get("error"),
                "joined": s["node"] in paths,
                "ana_state": paths.get(s["node"]),
                "connected": list(r.get("connected") or []),
            }
        )
    listeners = []
    if pub["state"] != "unpublishing":
        for n in paths:
            listeners += views.node_listeners(st, n)
    serving = sum(1 for r in replicas if r["joined"])
    return {
        "name": pub["name"],
        "uuid": pub["uuid"],
        "nqn": pub["nqn"],
        "nguid": pub["nguid"],
        "serial": pub["serial"],
        "kind": "published",
        "read_only": True,
        "origin": pub["snapshot_name"],
        "size_bytes": pub["size_bytes"],
        "state": pub["state"],
        "checksum": pub["checksum"],
        "hosts": list(pub["hosts"]),
        "health": f"{serving}/{len(replicas)}",
        "replicas": replicas,
        "listeners": listeners,
        "created": pub.get("created"),
    }


def published_rows(st: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for pub in section(st).values():
        v = published_view(st, pub)
        rows.append(
            {
                "name": v["name"],
                "kind": "published",
                "pool": None,
                "size_bytes": v["size_bytes"],
                "state": v["state"],
                "nqn": v["nqn"],
                "vol_id": None,
                "uuid": v["uuid"],
                "hosts": v["hosts"],
                "origin": v["origin"],
                "replicas": [{"node": r["node"], "state": r["state"]} for r in v["replicas"]],
                "health": v["health"],
                "primary": None,
            }
        )
    return rows


# --- the API (the console's node) ------------------------------------------------------------------


class PublishApi:
    def __init__(self, control: Any) -> None:
        self.c = control

    def methods(self) -> dict[str, Any]:
        return {"volume.publish": self.publish, "volume.unpublish": self.unpublish}

    async def publish(self, params: dict[str, Any]) -> dict[str, Any]:
        req = {  # checked at the dispatcher (nodeos/api/storage.py)
            "snapshot": params["snapshot"],
            "name": params["name"],
            "replicas": publish.parse_replicas(params.get("replicas")),  # "all" -> None
            "spread": params.get("spread") or "node",
        }
        wait = wait_param(params)
        self.c._need_storage(lambda st: snapshot_by_name(st, req["snapshot"], "snapshot"))
        await self.c._run("volume.publish", req)
        LOG.info("snapshot %s published as %s", req["snapshot"], req["name"])
        name = req["name"]

        def done(st: dict[str, Any]) -> Any:
            ref = st["names"].get(name)
            if ref is None or ref["kind"] != "published":
                raise OperationFailed(f"published volume {name!r} disappeared", field="name")
            pub = section(st)[ref["uuid"]]
            return published_view(st, pub) if wait == 0 or pub["state"] == "ready" else None

        return await self.c._wait(done, max(wait, 10.0) if wait == 0 else wait, f"publishing {name}")

    async def unpublish(self, params: dict[str, Any]) -> dict[str, Any]:
        name, force = params["name"], params.get("force", False)
        wait = wait_param(params)
        self.c._need_storage(lambda st: published_by_name(st, name))
        await self.c._run("volume.unpublish", {"name": name, "force": force})
        await self.c._wait(lambda st: True if name not in st["names"] else None, wait, f"unpublishing {name}")
        LOG.info("published volume %s unpublished", name)
        return {"name": name, "unpublished": True, "kind": "published"}


WRITES = {
    "volume.publish": decide_publish,
    "volume.unpublish": decide_unpublish,
}
