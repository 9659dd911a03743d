"""The `events` section of the replicated cluster map: what the cluster did and why.

The section is `{"events": {"log": [event, ...], "next_seq": int}}`: at most MAX_EVENTS
events (oldest dropped), each numbered by the map in commit order, so every node lists the
same events with the same numbers.

Two ways in, both pure:
- a map transition records its own event while it is applied (`record`): a volume settling
  to ready, a replica leaving in-sync, a pool created... exactly once, the same on every node,
  no extra Raft round trip;
- the `record_event` command (v1) for what happens outside the map (a leader change, a member
  that stops answering, network drift), proposed by the node that saw it.

The map reads no clock: an event's time is the proposer's (`at` of the command, or the time
the leader stamped on the entry, see `stamp`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodeos.errors import BadInput
from nodeos.observe import events as ev

MAX_EVENTS = 1000
SECTION = "events"

Handler = Callable[[dict[str, Any], dict[str, Any]], Any]


def empty_section() -> dict[str, Any]:
    return {SECTION: {"log": [], "next_seq": 1}}


def _section(st: dict[str, Any]) -> dict[str, Any]:
    # Maps restored from a snapshot taken before this section existed lack it.
    sec = st.get(SECTION)
    if not isinstance(sec, dict):
        sec = st[SECTION] = {"log": [], "next_seq": 1}
    return sec


def next_seq(st: dict[str, Any]) -> int:
    return int(_section(st)["next_seq"])


def record(st: dict[str, Any], kind: str, message: str, *, severity: str = "info", **context: Any) -> None:
    """Append the event of a map transition being applied; its `at` is filled in by `stamp`."""
    checked = ev.make_event(kind, message, severity=severity, at=0, **context)
    del checked["at"]  # not known here: the entry's time is stamped after the command applied
    sec = _section(st)
    sec["next_seq"] = ev.append(sec["log"], int(sec["next_seq"]), checked, MAX_EVENTS)


def appended_since(st: dict[str, Any], first_seq: int) -> list[dict[str, Any]]:
    """Events with seq >= first_seq, found from the end (called at every apply: the log is long)."""
    sec = st.get(SECTION)
    if not isinstance(sec, dict) or int(sec["next_seq"]) <= first_seq:
        return []
    log = sec["log"]
    k = len(log)
    while k > 0 and int(log[k - 1]["seq"]) >= first_seq:
        k -= 1
    return log[k:]


def stamp(st: dict[str, Any], first_seq: int, at: float | None) -> list[dict[str, Any]]:
    """Give the events appended since `first_seq` the entry's time; returns them.

    `at` is None for entries written before the leader stamped its proposals: such events take
    the time of the event before them (the log stays in time order).
    """
    new = appended_since(st, first_seq)
    if not new:
        return []
    if at is None:
        log = _section(st)["log"]
        before = len(log) - len(new) - 1
        at = log[before].get("at", 0) if before >= 0 else 0
    for e in new:
        e.setdefault("at", at)
    return new


def record_event_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Append one event; args are an event (see nodeos.observe.events) without `seq`."""
    if "seq" in args:
        # The map numbers events; a proposer choosing its own would break the one order.
        raise BadInput("seq is assigned by the map, not the proposer", field="seq")
    checked = ev.check_event(args)
    sec = _section(st)
    sec["next_seq"] = ev.append(sec["log"], int(sec["next_seq"]), checked, MAX_EVENTS)
    return {"seq": sec["next_seq"] - 1}


def register(handlers: dict[str, dict[int, Handler]]) -> None:
    """Add the `record_event` command to a map's command table."""
    handlers.setdefault("record_event", {})[1] = record_event_v1


def list_events(state: dict[str, Any], since: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
    """Events of a map state with seq > since (empty when the map has no events section yet)."""
    sec = state.get(SECTION)
    if not isinstance(sec, dict):
        return []
    return ev.after(sec.get("log") or [], since, limit)


def has_section(state: dict[str, Any]) -> bool:
    return isinstance(state.get(SECTION), dict)


def last_seq(state: dict[str, Any]) -> int:
    sec = state.get(SECTION)
    return int(sec.get("next_seq", 1)) - 1 if isinstance(sec, dict) else 0


# --- transitions seen in a node's report -----------------------------------------------------
# Replica states are compared before and after a report is folded in (storage_map.node_report):
# only leaving in-sync and coming back are events; creating -> syncing -> in-sync during a
# volume's create is its `volume_ready`, not a list of replica events.

_DOWN = ("degraded", "failed")
ReplicaView = Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]


def changed_replicas(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """Volumes whose entry differs between a node's old and new report: only their replica
    states can change with it (comparing every volume of the node at every report would cost
    more than the rest of the report)."""
    was, now = (old or {}).get("replicas") or {}, new.get("replicas") or {}
    out = [u for u, r in now.items() if was.get(u) != r]
    return out + [u for u in was if u not in now]


def replica_states(st: dict[str, Any], view: ReplicaView, uuids: list[str]) -> dict[str, dict[int, str]]:
    """The replica states (storage_map.replica_view) of those of `uuids` that are ready volumes."""
    out = {}
    for uuid in uuids:
        vol = st["volumes"].get(uuid)
        if vol is not None and vol["state"] == "ready":
            out[uuid] = {s["node"]: str(view(st, vol, s["node"]).get("state")) for s in vol["placement"]}
    return out


def replica_changes(
    st: dict[str, Any], before: dict[str, dict[int, str]], after: dict[str, dict[int, str]]
) -> None:
    for uuid in sorted(after):
        vol = st["volumes"].get(uuid)
        if vol is None or vol["state"] != "ready":
            continue
        for nid in sorted(after[uuid]):
            a, b = before.get(uuid, {}).get(nid), after[uuid][nid]
            if a is None or a == b:
                continue
            where = f"volume {vol['name']}: replica on node {nid}"
            if a == "in-sync" and b in _DOWN:
                failed = b == "failed"
                kind, sev = ("replica_failed", "critical") if failed else ("replica_degraded", "warning")
                record(st, kind, f"{where} is {b}", severity=sev, volume=uuid, node=nid)
            elif a in _DOWN and b == "syncing":
                record(st, "rebuild_started", f"{where} is rebuilding", volume=uuid, node=nid)
            elif a != "in-sync" and b == "in-sync":
                kind = "rebuild_finished" if a == "syncing" else "replica_in_sync"
                record(st, kind, f"{where} is in sync again", volume=uuid, node=nid)


def report_changes(st: dict[str, Any], nid: int, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    """A node's data plane going unhealthy or healthy, its drives turning failing or missing."""
    if old is None:
        return  # a node's first report says how it is, not what changed
    was_err = (old.get("dataplane") or {}).get("error")
    now_err = (new.get("dataplane") or {}).get("error")
    if (new.get("dataplane") or {}).get("name", "none") != "none" and bool(was_err) != bool(now_err):
        if now_err:
            msg = f"data plane of node {nid} is unhealthy: {str(now_err)[:200]}"
            record(st, "dataplane_down", msg, severity="critical", node=nid)
        else:
            record(st, "dataplane_up", f"data plane of node {nid} is healthy again", node=nid)
    was_stuck = {c.get("method") for c in (old.get("dataplane") or {}).get("stuck") or []}
    for c in (new.get("dataplane") or {}).get("stuck") or []:
        if c.get("method") not in was_stuck:
            msg = f"data plane call {c.get('method')} of node {nid} is stuck (lane {c.get('lane')})"
            record(st, "dataplane_call_stuck", msg, severity="critical", node=nid)
    old_drives, new_drives = old.get("drives") or {}, new.get("drives") or {}
    for drive in sorted(new_drives, key=str):
        health = (new_drives.get(drive) or {}).get("health") if isinstance(new_drives[drive], dict) else None
        was = (old_drives.get(drive) or {}).get("health") if isinstance(old_drives.get(drive), dict) else None
        if health in ("failing", "missing") and was != health:
            what = "is failing" if health == "failing" else "is missing (removed or dead)"
            msg = f"drive {drive} of node {nid} {what}"
            record(st, "drive_failed", msg, severity="critical", node=nid, drive=str(drive))


def volume_failed(st: dict[str, Any], vol: dict[str, Any], nid: int, view: dict[str, Any]) -> None:
    step = str(view.get("step") or "create")
    record(
        st,
        "volume_failed",
        f"volume {vol['name']} failed: {vol.get('error')}"[: ev.MAX_MESSAGE],
        severity="critical",
        volume=vol["uuid"],
        node=nid,
        step=step[:256],
        reason=str(view.get("error") or "failed")[:256],
    )


def snapshot_taken(st: dict[str, Any], snap: dict[str, Any]) -> None:
    msg = f"snapshot {snap['name']} of volume {snap['volume_name']} taken"
    record(st, "snapshot_taken", msg, volume=snap["volume"], snapshot=snap["name"])


def snapshot_dropped(
    st: dict[str, Any], snap: dict[str, Any], why: str, views: dict[int, Any] | None = None
) -> None:
    """A snapshot deleted, or dropped because a node failed to take it (the first such node named)."""
    nid: int | None = None
    for n, v in sorted((views or {}).items()):
        if isinstance(v, dict) and v.get("state") == "failed":
            nid, why = n, f"failed on node {n}: {v.get('error') or 'failed'}"[:256]
            break
    record(
        st,
        "snapshot_dropped",
        f"snapshot {snap['name']} of volume {snap['volume_name']} dropped ({why})"[: ev.MAX_MESSAGE],
        severity="info" if nid is None else "warning",
        volume=snap["volume"],
        snapshot=snap["name"],
        node=nid,
        reason=why,
    )
