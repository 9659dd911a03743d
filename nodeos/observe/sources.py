"""Small read interfaces the exporter reads the node through, and the pure change detector
that turns two successive readings into events.

Each reader takes the object it reads and returns plain data, tolerating what is absent
(a cluster service that is not running, a map section that does not exist yet).
"""

from __future__ import annotations

from typing import Any

from nodeos.observe import events as ev
from nodeos.observe.metrics_map import IN_SYNC


def cluster_view(svc: Any) -> dict[str, Any]:
    """The cluster service's Raft status and map state ({"member": False} outside a cluster)."""
    driver = getattr(svc, "driver", None)
    if svc is None or driver is None or getattr(svc, "identity", None) is None:
        return {"member": False}
    st = dict(driver.status())
    timings = {}
    for key, attr in (("fsync", "fsync_latency"), ("commit", "commit_latency")):
        hist = getattr(driver, attr, None)
        if hist is not None:
            timings[key] = hist.snapshot()
    cmap = getattr(driver, "map", None)
    mstate = getattr(cmap, "state", {}) or {}
    nonconforming = int(getattr(cmap, "nonconforming_total", 0) or 0)
    return {**st, "member": True, "map": mstate, "timings": timings, "nonconforming": nonconforming}


def digest(c: dict[str, Any]) -> dict[str, Any]:
    """The part of a cluster view that `changes` compares, copied (the live map keeps changing)."""
    m = c.get("map") or {}
    vols = {
        k: {f: (v or {}).get(f) for f in ("name", "epoch", "primary")}
        for k, v in (m.get("volumes") or {}).items()
        if isinstance(v, dict)
    }
    reps = {
        k: {n: {"state": (r or {}).get("state")} for n, r in v.items() if isinstance(r, dict)}
        for k, v in (m.get("replica_states") or {}).items()
        if isinstance(v, dict)
    }
    progress = c.get("progress")
    reports = m.get("reports") or {}
    own = reports.get(c.get("node_id"), reports.get(str(c.get("node_id")))) or {}
    drives = {
        str(d.get("id") or d.get("serial")): str(d.get("health", ""))
        for d in (own.get("drives") or [] if isinstance(own, dict) else [])
        if isinstance(d, dict) and (d.get("id") or d.get("serial"))
    }
    return {
        "drives": drives,
        "cluster_id": m.get("cluster_id"),
        "member": c.get("member"),
        "node_id": c.get("node_id"),
        "leader": c.get("leader"),
        "term": c.get("term"),
        "progress": {k: {"active": (p or {}).get("active")} for k, p in progress.items()}
        if isinstance(progress, dict)
        else None,
        "map": {"volumes": vols, "replica_states": reps},
    }


def dataplane_up(describe: dict[str, Any] | None, error: str | None) -> bool:
    """A data plane is up when describe() answered and does not say it is unusable."""
    if error is not None or describe is None:
        return False
    return describe.get("usable", True) is not False and "error" not in describe


def changes(prev: dict[str, Any], cur: dict[str, Any], at: float) -> list[dict[str, Any]]:
    """Events for what differs between two readings of {cluster, dataplane_up, drift_items}.

    `prev` is empty on the first reading: nothing is reported then except what is already bad.
    """
    out: list[dict[str, Any]] = []
    pc, cc = prev.get("cluster") or {}, cur.get("cluster") or {}
    if prev and cc.get("member") and pc.get("leader") != cc.get("leader") and cc.get("leader"):
        out.append(
            ev.make_event(
                "leader_changed",
                f"leader is now node {cc['leader']} (term {cc.get('term')})",
                at=at,
                node=cc["leader"],
                term=cc.get("term"),
            )
        )
    out.extend(_member_changes(pc, cc, at))
    out.extend(_volume_changes(pc, cc, at))
    if prev:
        was = pc.get("drives") or {}
        for drive, health in sorted((cc.get("drives") or {}).items()):
            if health == "failing" and was.get(drive, "ok") != "failing":
                out.append(
                    ev.make_event(
                        "drive_failed",
                        f"drive {drive} of node {cc.get('node_id')} is failing",
                        severity="critical",
                        at=at,
                        drive=drive,
                        node=cc.get("node_id"),
                    )
                )
    if "dataplane_up" in cur and prev.get("dataplane_up", True) != cur["dataplane_up"]:
        up = cur["dataplane_up"]
        out.append(
            ev.make_event(
                "dataplane_up" if up else "dataplane_down",
                "data plane answers again"
                if up
                else f"data plane is down: {cur.get('dataplane_error') or '?'}",
                severity="info" if up else "critical",
                at=at,
            )
        )
    pd, cd = prev.get("drift_items"), cur.get("drift_items")
    if cd is not None and cd != pd and (cd or pd):
        out.append(
            ev.make_event(
                "drift_found" if cd else "drift_cleared",
                f"network differs from the plan in {cd} setting(s)"
                if cd
                else "network matches the plan again",
                severity="warning" if cd else "info",
                at=at,
            )
        )
    return out


def _alive(c: dict[str, Any]) -> dict[str, bool] | None:
    """Members' liveness as the leader sees it; None when this reading is not a leader's."""
    if not c.get("member") or c.get("leader") != c.get("node_id") or not isinstance(c.get("progress"), dict):
        return None
    me = c.get("node_id")
    return {str(nid): nid == me or bool((pr or {}).get("active")) for nid, pr in c["progress"].items()}


def _member_changes(pc: dict[str, Any], cc: dict[str, Any], at: float) -> list[dict[str, Any]]:
    before, now = _alive(pc), _alive(cc)
    if before is None or now is None:
        return []  # liveness is only compared between two readings of the same leader
    out = []
    for nid in sorted(set(before) & set(now)):
        if before[nid] and not now[nid]:
            out.append(
                ev.make_event(
                    "node_failed",
                    f"node {nid} stopped answering the leader",
                    severity="critical",
                    at=at,
                    node=_int(nid),
                )
            )
        elif not before[nid] and now[nid]:
            out.append(
                ev.make_event("node_recovered", f"node {nid} answers the leader again", at=at, node=_int(nid))
            )
    for nid in sorted(set(now) - set(before)):
        out.append(ev.make_event("node_joined", f"node {nid} joined the cluster", at=at, node=_int(nid)))
    for nid in sorted(set(before) - set(now)):
        out.append(ev.make_event("node_left", f"node {nid} left the cluster", at=at, node=_int(nid)))
    return out


def _volume_changes(pc: dict[str, Any], cc: dict[str, Any], at: float) -> list[dict[str, Any]]:
    """Rebuilds seen in the map, reported by the leader only. Failovers are not derived here:
    the map records its own (`failover`, with the epoch: nodeos/storage/failover_handlers.py)."""
    if _alive(pc) is None or _alive(cc) is None:
        return []
    pm, cm = pc.get("map") or {}, cc.get("map") or {}
    pv, cv = pm.get("volumes") or {}, cm.get("volumes") or {}
    prs, crs = pm.get("replica_states") or {}, cm.get("replica_states") or {}
    out = []
    for uuid in sorted(set(pv) & set(cv), key=str):
        new = cv[uuid] or {}
        name = new.get("name") or uuid
        was, now = prs.get(uuid) or {}, crs.get(uuid) or {}
        for node in sorted(set(now), key=str):
            a = str((was.get(node) or {}).get("state", "")).lower()
            b = str((now.get(node) or {}).get("state", "")).lower()
            if b in ("rebuilding", "resyncing") and a != b:
                out.append(
                    ev.make_event(
                        "rebuild_started",
                        f"volume {name}: rebuilding its replica on node {node}",
                        at=at,
                        volume=str(uuid),
                        node=_int(node),
                    )
                )
            elif b in IN_SYNC and a in ("rebuilding", "resyncing"):
                out.append(
                    ev.make_event(
                        "rebuild_finished",
                        f"volume {name}: replica on node {node} in sync",
                        at=at,
                        volume=str(uuid),
                        node=_int(node),
                    )
                )
    return out


def _int(v: Any) -> int | str:
    try:
        return int(v)
    except (TypeError, ValueError):
        return str(v)


def hold_liveness(cur: dict[str, Any], down_since: dict[Any, float], now: float, hold_s: float) -> None:
    """Count a member as down only once it has not answered for `hold_s` (edits `cur`).

    Raft clears the leader's "recently active" flags at every election timeout until the next
    heartbeat answer, and a new leader starts with every flag clear: one reading can catch a
    healthy member looking silent.
    """
    progress = (cur.get("cluster") or {}).get("progress")
    if not isinstance(progress, dict):
        down_since.clear()
        return
    for nid in list(down_since):
        if nid not in progress:
            del down_since[nid]
    for nid, pr in progress.items():
        if pr.get("active"):
            down_since.pop(nid, None)
        elif now - down_since.setdefault(nid, now) < hold_s:
            pr["active"] = True
