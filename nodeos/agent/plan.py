"""What a node's agent must do to make its data plane match the cluster map (pure).

Input: the map's state, this node's member id, and the node's own records (what its data
plane has, as recorded by the durable operations in nodeos/node/ops.py). Output: an ordered
list of steps, each one durable operation. Deletions of volumes and snapshots come before
creations (a name may be reused once the map dropped the old object), pools are created
first and deleted last. Objects the map marks `failed` are left alone: the operator decides.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from nodeos import tlskey
from nodeos.agent.grow import grow_phase
from nodeos.control.views import pool_of
from nodeos.node import replicas
from nodeos.storage.failover_map import released_nodes
from nodeos.storage.lookup import replica_report


@dataclass(frozen=True)
class Step:
    op: str  # an Ops operation: "pool.create", "volume.create", ...
    name: str  # the local record's key (pool / volume / snapshot name)
    data: dict[str, Any] = field(default_factory=dict)  # the intent's data
    record: dict[str, Any] | None = None  # the transient local record written with the intent
    db: str = ""  # where `record` goes


def _mine(objs: dict[str, Any], me: int) -> dict[str, dict[str, Any]]:
    return {o["name"]: o for o in objs.values() if any(s["node"] == me for s in o["placement"])}


def _slot(obj: dict[str, Any], me: int) -> dict[str, Any]:
    return next(s for s in obj["placement"] if s["node"] == me)


def local_volume(st: dict[str, Any], vol: dict[str, Any], me: int) -> dict[str, Any]:
    """The local record of `vol`'s replica on this node, as nodeos/node/ops.py keeps it."""
    slot = _slot(vol, me)
    pool = pool_of(st, me, slot["pool_id"]) or {"name": "?"}
    return {
        "name": vol["name"],
        "uuid": vol["uuid"],
        "vol_id": vol["vol_id"],
        "pool": pool["name"],
        "pool_id": slot["pool_id"],
        "size_bytes": vol["size_bytes"],
        "nqn": vol["nqn"],
        "nguid": vol["nguid"],
        "serial": vol["serial"],
        "kind": vol["kind"],
        "origin": vol.get("origin"),
        "state": "creating",
        "hosts": list(vol["hosts"]),
        # Applied with the export at create: without it the next pass re-exports at once.
        "secrets": secrets_digest(st, vol),
        "qos_iops": vol.get("qos_iops"),
        "qos_mbps": vol.get("qos_mbps"),
        "created": vol.get("created"),
        "adopt_uuid": replicas.origin_mirror_uuid(st, vol),
        **replicas.record_fields(st, vol, me),
    }


def _exported(st: dict[str, Any], vol: dict[str, Any], nid: int, epoch: int) -> bool:
    """A secondary's replica is exported (its own report says syncing or in-sync) to the primary
    of `epoch` (a new volume's primary re-placed: the others retarget to it first)."""
    rep = replica_report(st, nid, vol["uuid"])
    return rep.get("state") in ("syncing", "in-sync") and int(rep.get("epoch") or 1) == epoch


def plan(
    st: dict[str, Any],
    me: int,
    pools: dict[str, dict[str, Any]],
    vols: dict[str, dict[str, Any]],
    snaps: dict[str, dict[str, Any]],
    skip: set[str] = frozenset(),  # type: ignore[assignment]
    overdue: set[str] = frozenset(),  # type: ignore[assignment]
) -> list[Step]:
    """`pools`/`vols`/`snaps`: this node's records by name; `skip`: keys ("volume:NAME", ...)
    whose last attempt failed and wait for the map to change; `overdue`: uuids of replicas
    that waited for their primary's teardown (`waits_for_primary`) past the agent's bound."""
    steps: list[Step] = []
    want_pools = {p["name"]: p for p in st["pools"].values() if p["node"] == me}
    want_vols = _mine(st["volumes"], me)
    want_snaps = _mine(st["snapshots"], me)

    # 1. what the map no longer wants: snapshots, then volumes
    for name, s in snaps.items():
        w = want_snaps.get(name)
        if s["state"] != "deleting" and (w is None or w["uuid"] != s.get("uuid") or w["state"] == "deleting"):
            steps.append(
                Step("snapshot.delete", name, {"name": name}, dict(s, state="deleting"), "snapshots")
            )
    for name, v in vols.items():
        w = want_vols.get(name)
        if v["state"] != "deleting" and (w is None or w["uuid"] != v["uuid"] or w["state"] == "deleting"):
            if _leg_in_use(st, v, me):
                continue  # re-placed elsewhere: the primary drops my leg from its mirror first
            if waits_for_primary(st, v, me) is not None and v["uuid"] not in overdue:
                continue  # deleted: the primary stops its mirror and cuts my leg first
            steps.append(Step("volume.delete", name, {"name": name}, dict(v, state="deleting"), "volumes"))

    # 2. pools the map wants
    for name, p in want_pools.items():
        if name not in pools and p["state"] == "creating" and f"pool:{name}" not in skip:
            rec = {
                "name": name,
                "pool_id": p["pool_id"],
                "drives": list(p["drives"]),
                "devices": list(p["devices"]),
                "state": "creating",
                "size_bytes": 0,
                "created": p.get("created"),
            }
            steps.append(Step("pool.create", name, {"name": name}, rec, "pools"))

    # 3. volumes the map wants: create, grow, re-export
    for name, w in want_vols.items():
        if w["state"] in ("deleting", "failed") or f"volume:{name}" in skip:
            continue
        have = vols.get(name)
        if have is not None and have["uuid"] != w["uuid"]:
            continue  # the old one is deleted first (step 1); created on the next pass
        if have is None:
            # A ready volume gets a new replica here when one was re-placed onto this node: a
            # plain new LV (a clone's too), copied in full by the primary's mirror.
            placed = w["state"] == "ready" and replicas.replicated(w) and w["primary"] != me
            if (w["state"] != "creating" and not placed) or (
                _slot(w, me)["pool_id"] not in {p["pool_id"] for p in pools.values()}
            ):
                continue  # the pool is not there yet
            rec = local_volume(st, w, me)
            if w["kind"] == "clone" and not placed:
                snap = st["snapshots"].get(w.get("origin_uuid") or "")
                if snap is None:
                    continue
                steps.append(
                    Step("volume.clone", name, {"name": name, "snap_id": snap["snap_id"]}, rec, "volumes")
                )
            else:
                steps.append(Step("volume.create", name, {"name": name}, rec, "volumes"))
            continue
        if have["state"] == "standby":
            if w["primary"] != me:
                rec = dict(have, **replicas.record_fields(st, w, me), state="exporting")
                steps.append(Step("volume.replica", name, {"name": name, "me": me}, rec, "volumes"))
            elif all(_exported(st, w, s["node"], int(w["epoch"])) for s in w["placement"] if s["node"] != me):
                rec = dict(have, **replicas.record_fields(st, w, me), state="assembling")
                steps.append(Step("volume.mirror", name, {"name": name, "me": me}, rec, "volumes"))
            continue
        if have["state"] != "ready":
            continue  # an interrupted operation is being recovered
        if replicas.replicated(w):
            role = failover_step(st, w, have, me)
            if role is not None:
                steps.append(role)
                continue
        if replicas.replicated(w):
            phase = grow_phase(st, w, have, me)
            if phase is not None:
                data = {"name": name, "size_bytes": int(w["size_bytes"]), "phase": phase}
                steps.append(Step("volume.resize", name, data, dict(have, state="resizing"), "volumes"))
                continue
        if w["size_bytes"] > have["size_bytes"] and not replicas.replicated(w):
            steps.append(
                Step(
                    "volume.resize",
                    name,
                    {"name": name, "size_bytes": w["size_bytes"]},
                    dict(have, state="resizing"),
                    "volumes",
                )
            )
        elif sorted(w["hosts"]) != sorted(have.get("hosts") or []) or have.get("secrets") != secrets_digest(
            st, w
        ):
            steps.append(
                Step(
                    "volume.grant",
                    name,
                    {"name": name, "old_hosts": list(have.get("hosts") or [])},
                    dict(have, hosts=list(w["hosts"]), secrets=secrets_digest(st, w), state="exporting"),
                    "volumes",
                )
            )

    # 4. snapshots the map wants
    for name, w in want_snaps.items():
        if name in snaps or w["state"] != "creating" or f"snapshot:{name}" in skip:
            continue
        if w.get("phase") not in (None, "taking"):
            continue  # a replicated volume's snapshot: only once its primary holds the writes
        step = snapshot_step(st, w, vols.get(w["volume_name"]))
        if step is not None:
            steps.append(step)

    # 5. pools the map no longer wants, once nothing of ours lives in them
    for name, p in pools.items():
        w = want_pools.get(name)
        if p["state"] == "deleting" or not (
            w is None or w["pool_id"] != p["pool_id"] or w["state"] == "deleting"
        ):
            continue
        if any(v["pool_id"] == p["pool_id"] for v in vols.values()) or any(
            s["pool_id"] == p["pool_id"] for s in snaps.values()
        ):
            continue
        steps.append(Step("pool.delete", name, {"name": name}, dict(p, state="deleting"), "pools"))
    return steps


def snapshot_step(st: dict[str, Any], w: dict[str, Any], local: dict[str, Any] | None) -> Step | None:
    """The step that takes this node's leg of snapshot `w` of its volume, whose local record is
    `local`; None while the volume is not ready here. The agent's plan runs it (a 1-replica
    volume, or phase "taking"); a primary's one-step snapshot asks for it (nodeos/agent/onestep.py)."""
    vol = st["volumes"].get(w["volume"])
    if vol is None or local is None or local["state"] != "ready":
        return None
    rec = {
        "name": w["name"],
        "uuid": w["uuid"],
        "snap_id": w["snap_id"],
        "volume": w["volume_name"],
        "volume_uuid": w["volume"],
        "pool": local["pool"],
        "pool_id": local["pool_id"],
        "size_bytes": w["size_bytes"],
        "state": "creating",
        "created": w.get("created"),
    }
    data = {"name": w["name"], "vol_id": local["vol_id"], "uuid": w["uuid"]}
    return Step("volume.snapshot", w["name"], data, rec, "snapshots")


def _leg_in_use(st: dict[str, Any], rec: dict[str, Any], me: int) -> bool:
    """My replica of a volume that lives on without me (re-placed) is still a leg of its primary's
    mirror, as the primary's report at the volume's epoch says: tearing my export down first
    would stall the volume's writes until the primary gives up on it (pitfall 25)."""
    vol = st["volumes"].get(rec.get("uuid") or "")
    if vol is None or vol["state"] == "deleting" or vol["primary"] == me or not replicas.replicated(vol):
        return False
    if any(s["node"] == me for s in vol["placement"]) or not replicas.node_up(st, vol["primary"]):
        return False
    rep = replica_report(st, vol["primary"], vol["uuid"])
    if int(rep.get("epoch") or 0) != int(vol["epoch"]):
        return False
    return any(int(n) == me for n in rep.get("members") or {})


def waits_for_primary(st: dict[str, Any], rec: dict[str, Any], me: int) -> str | None:
    """Why my replica (local record `rec`) of a volume being deleted stays exported a while
    longer, or None. Teardown is ordered through the map (issue 25): the primary's mirror holds
    a leg on my export, and a leg that vanishes under md queues its I/O (md's superblock write
    among it) until the leg is cut. So my export goes only once the primary's report no longer
    holds the volume (its mirror stopped, its legs detached, its record gone), or the primary is
    down (nothing of it runs to wait for), or the agent's bound passed (`overdue` in `plan`:
    the primary cuts its legs with their loss bounded first, so it cannot wedge then either)."""
    vol = st["volumes"].get(rec.get("uuid") or "")
    if vol is None or vol["state"] != "deleting" or not replicas.replicated(vol):
        return None
    prim = int(vol["primary"])
    if prim == me or rec.get("role") == "primary" or not replicas.node_up(st, prim):
        return None
    if vol["uuid"] not in ((st["reports"].get(prim) or {}).get("replicas") or {}):
        return None
    name = (st["nodes"].get(prim) or {}).get("name") or f"node-{prim}"
    return f"delete: waiting for primary {name} to stop its mirror"


def _reports_epoch(st: dict[str, Any], vol: dict[str, Any], nid: int) -> bool:
    """`nid` exports its replica at the map's epoch (to the map's primary) and is done with it."""
    rep = replica_report(st, nid, vol["uuid"])
    return (
        rep.get("state") in ("syncing", "in-sync")
        and rep.get("step") is None
        and int(rep.get("epoch") or 0) == int(vol["epoch"])
    )


def failover_step(st: dict[str, Any], w: dict[str, Any], have: dict[str, Any], me: int) -> Step | None:
    """The role change a ready replica of a replicated volume needs to follow the map (None: it
    follows already). The map moves `primary` within `placement` and bumps `epoch` each time."""
    name, role, epoch = w["name"], have.get("role"), int(w["epoch"])
    have_epoch = int(have.get("epoch") or 1)
    if epoch < have_epoch:
        # A map behind what this node followed already (read back after a restart, or a stale
        # copy): never follow an older epoch (promote, demote or retarget to its primary).
        return None
    fields = replicas.record_fields(st, w, me)
    others = [int(s["node"]) for s in w["placement"] if s["node"] != me]
    if role == "primary" and (w["primary"] != me or have_epoch < epoch):
        # The old primary (back, or handing off); a primary that missed an epoch also steps
        # down: its leg may lack what was written meanwhile.
        # The record keeps its remotes and host_nqn until the demote detached them.
        kept = {k: v for k, v in fields.items() if k not in ("remotes", "host_nqn")}
        rec = dict(have, **dict(kept, role="secondary", epoch=epoch), state="demoting")
        return Step("volume.demote", name, {"name": name, "me": me, "epoch": epoch}, rec, "volumes")
    if role == "secondary" and w["primary"] != me and have_epoch < epoch:
        rec = dict(have, **fields, state="retargeting")
        return Step("volume.retarget", name, {"name": name, "me": me, "epoch": epoch}, rec, "volumes")
    if role == "secondary" and w["primary"] == me:
        in_sync = replicas.in_sync_of(w)
        if me not in in_sync:
            return None  # never promote a replica that may lack acknowledged writes
        legs = [n for n in others if n in in_sync and replicas.node_up(st, n)]
        if not all(_reports_epoch(st, w, n) for n in legs):
            return None  # they still export to the old primary
        rec = dict(have, **fields, state="promoting")
        return Step(
            "volume.promote", name, {"name": name, "me": me, "epoch": epoch, "attach": legs}, rec, "volumes"
        )
    if role == "primary":
        mine = replica_report(st, me, w["uuid"])
        if int(mine.get("epoch") or 0) != epoch:
            return None  # my mirror has not reported at this epoch yet (just promoted)
        # A node released for its update (a rolling upgrade) is not taken back until its release
        # ends: its leg was cut on purpose while it was alive (nodeos/agent/legs.py).
        released = released_nodes(st)
        back = [
            n for n in others if replicas.node_up(st, n) and _reports_epoch(st, w, n) and n not in released
        ]
        # Replicas re-placed elsewhere: their legs leave my mirror, then their remotes go.
        gone = sorted({int(r["node"]) for r in have.get("remotes") or []} - set(others))
        gone = sorted({*gone, *(int(n) for n in have.get("gone") or [])})
        if mine.get("state") == "failed":
            lost = back  # my md is not assembled (after a restart): assemble it with them
        elif "members" in mine:
            members = {int(k): v for k, v in mine["members"].items()}
            lost = [n for n in back if members.get(n) in (None, "failed")]
        elif gone:
            lost = []
        else:
            return None
        if lost or gone or mine.get("state") == "failed":
            rec = dict(have, remotes=fields["remotes"], gone=gone)
            data = {"name": name, "me": me, "epoch": epoch, "attach": back, "rejoin": lost, "detach": gone}
            return Step("volume.rejoin", name, data, rec, "volumes")
    return None


def secrets_digest(st: dict[str, Any], vol: dict[str, Any]) -> list[Any]:
    """Which granted hosts carry a DH-HMAC-CHAP secret, and for a host with TLS its policy and
    a digest of its sealed key (a change re-applies the export). The secrets themselves never go
    into local records or reports; a host without TLS reads as before TLS (no re-export)."""
    out: list[Any] = []
    for h in sorted(vol["hosts"]):
        rec = st["hosts"].get(h) or {}
        dh = bool(rec.get("dhchap_secret"))
        if tlskey.host_policy(rec) == "off":
            out.append(dh)
        else:
            sealed = str(rec.get("tls_key") or "")
            row = [dh, tlskey.host_policy(rec), hashlib.sha256(sealed.encode()).hexdigest()[:16]]
            if tlskey.host_derivation(rec) != "standard":  # a host from before the choice: as before
                row.append(tlskey.host_derivation(rec))
            out.append(row)
    return out
