"""The map's side of the rolling cluster upgrade (decided in nodeos/update/rolling.py): the record
`st["upgrade"]` and the three commands that change it (feature level 5; `upgrade_step` v2,
level 6, adds the `release` step).

- `upgrade_start {id, version, bundle: {sha256, size, source}, domains: [{name, nodes}],
  allow_downgrade}`: refused while another upgrade is running, paused or stopped;
- `upgrade_step {id, at, step, to_at, to_step, note, sent?}`: a compare-and-set on (id, at, step),
  so a step proposed twice (a leader that died after proposing, its successor deciding again)
  applies once and the second is a no-op (`changed: false`); `sent` records the nodes handed the
  update in this domain with the boot id each had then;
- `upgrade_step` v2 (feature level 6, release 0.6.0; applied in nodeos/storage/upgrade_release.py,
  as it changes volumes' in-sync sets): v1's compare-and-set, plus the step `release` between
  `handover` and `update`, which releases the domain's replicas for its update. v1 is unchanged
  (it never releases): a command's apply is frozen per version, so a release that knows only v1
  applies a v1 log as before;
- `upgrade_state {id, state, reason?}`: pause (running -> paused), resume (paused or stopped ->
  running), stop (running -> stopped, with the reason), abort (running, paused or stopped ->
  aborted), done (running, past the last domain -> done).

Each change is an event (`upgrade`), and the record keeps its last HISTORY notes.
"""

from __future__ import annotations

import re
from typing import Any

from nodeos.cluster import events as map_events
from nodeos.errors import BadInput, NotFound

STEPS = ("handover", "update", "rejoin", "sync")  # upgrade_step v1
STEPS_V2 = ("handover", "release", "update", "rejoin", "sync")
STATES = ("running", "paused", "stopped", "aborted", "done")
ACTIVE = ("running", "paused", "stopped")  # an upgrade in these states blocks a new one
MOVES: dict[str, tuple[str, ...]] = {  # state -> the states it may go to
    "running": ("paused", "stopped", "aborted", "done"),
    "paused": ("running", "aborted"),
    "stopped": ("running", "aborted"),
}
HISTORY = 50
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def handing_over(st: dict[str, Any], nid: int) -> bool:
    """The node is in the domain a running upgrade is taking down: its primaries move away
    (nodeos/storage/failover.py `primary_trouble`), its replicas stay and are resynced after."""
    up = st.get("upgrade") or {}
    if up.get("state") != "running" or up.get("at", 0) >= len(up.get("domains") or []):
        return False
    steps = ("handover", "release", "update", "rejoin")  # `release`: only in a v2 record
    return up.get("step") in steps and nid in up["domains"][up["at"]]["nodes"]


def _handing(st: dict[str, Any]) -> set[int]:
    return {n for n in st["nodes"] if handing_over(st, n)}


def _withdraw(st: dict[str, Any], before: set[int]) -> None:
    """Planned moves not yet done off nodes the upgrade no longer takes down (paused, stopped,
    aborted, or on to the next step) are withdrawn, as an undrain withdraws them: nothing else
    would finish them, and their primaries would stay fenced."""
    for vol in st["volumes"].values():
        prim = vol["primary"]
        if (
            vol.get("handoff")
            and prim in before
            and not handing_over(st, prim)
            and (st["nodes"].get(prim) or {}).get("state") != "draining"
        ):
            vol["handoff"] = None


def current(st: dict[str, Any], uid: Any) -> dict[str, Any]:
    up = st.get("upgrade")
    if not up or up.get("id") != uid:
        raise NotFound(f"no upgrade {uid!r}", field="id", allowed=[up["id"]] if up else None)
    return up


def note(st: dict[str, Any], up: dict[str, Any], text: str, severity: str = "info") -> None:
    up["history"] = [*up.get("history", []), text][-HISTORY:]
    map_events.record(st, "upgrade", f"upgrade to {up['version']}: {text}", severity=severity)


def _check_start(st: dict[str, Any], a: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(a.get("id"), str) or not 0 < len(a["id"]) <= 64:
        raise BadInput("id must be a string of 1-64 characters", field="id")
    if not isinstance(a.get("version"), str) or not 0 < len(a["version"]) <= 64:
        raise BadInput("version must be a version string of at most 64 characters", field="version")
    b = a.get("bundle")
    if (
        not isinstance(b, dict)
        or not isinstance(b.get("sha256"), str)
        or not _HEX64.match(b["sha256"])
        or type(b.get("size")) is not int
        or b["size"] <= 0
        or b.get("source") not in st["nodes"]
    ):
        raise BadInput("bundle must be {sha256 (64 hex), size (> 0), source (a member)}", field="bundle")
    doms = a.get("domains")
    seen: set[int] = set()
    if not isinstance(doms, list) or not doms:
        raise BadInput("domains must be a non-empty list of {name, nodes}", field="domains")
    for d in doms:
        nodes = d.get("nodes") if isinstance(d, dict) else None
        if not isinstance(nodes, list) or not nodes or not isinstance(d.get("name"), str):
            raise BadInput("each domain is {name, nodes: [member ids]}", field="domains")
        for n in nodes:
            if type(n) is not int or n not in st["nodes"] or n in seen:
                raise BadInput(
                    f"domain {d['name']}: node {n!r} is not a member or is listed twice", field="domains"
                )
            seen.add(n)
    return [{"name": d["name"], "nodes": list(d["nodes"])} for d in doms]


def upgrade_start_v1(st: dict[str, Any], a: dict[str, Any]) -> Any:
    old = st.get("upgrade")
    if old and old.get("state") in ACTIVE:
        raise BadInput(
            f"upgrade {old['id']} to {old['version']} is {old['state']}: resume or abort it first",
            field="upgrade",
        )
    doms = _check_start(st, a)
    b = a["bundle"]
    up = {
        "id": a["id"],
        "version": a["version"],
        "bundle": {"sha256": b["sha256"], "size": b["size"], "source": b["source"]},
        "allow_downgrade": bool(a.get("allow_downgrade")),
        "domains": doms,
        "at": 0,
        "step": "handover",
        "sent": {},
        "state": "running",
        "reason": None,
        "history": [],
    }
    st["upgrade"] = up
    order = ", ".join(d["name"] for d in doms)
    note(st, up, f"started: {len(doms)} failure domain(s) in turn: {order}")
    return {"id": up["id"], "state": "running"}


def upgrade_step_v1(st: dict[str, Any], a: dict[str, Any]) -> Any:
    return apply_step(st, a, STEPS)


def apply_step(st: dict[str, Any], a: dict[str, Any], steps: tuple[str, ...]) -> dict[str, Any]:
    """The compare-and-set of `upgrade_step` over `steps` (v1's, or v2's with `release`)."""
    up = current(st, a.get("id"))
    if up["state"] != "running" or (a.get("at"), a.get("step")) != (up["at"], up["step"]):
        return {"changed": False, "at": up["at"], "step": up["step"], "state": up["state"]}
    to_at, to_step = a.get("to_at"), a.get("to_step")
    if type(to_at) is not int or to_at not in (up["at"], up["at"] + 1) or to_step not in steps:
        raise BadInput(
            f"step to ({to_at!r}, {to_step!r}) is not allowed", field="to_step", allowed=list(steps)
        )
    sent = a.get("sent")
    if sent is not None:
        if not isinstance(sent, dict) or not all(isinstance(k, (int, str)) for k in sent):
            raise BadInput("sent must map node ids to boot ids", field="sent")
        up["sent"] = {**up["sent"], **{str(k): str(v) for k, v in sent.items()}}
    if to_at != up["at"]:
        up["sent"] = {}
    before = _handing(st)
    up["at"], up["step"] = to_at, to_step
    _withdraw(st, before)
    text = a.get("note")
    if isinstance(text, str) and text:
        note(st, up, text[:300])
    return {"changed": True, "at": up["at"], "step": up["step"], "state": up["state"]}


def upgrade_state_v1(st: dict[str, Any], a: dict[str, Any]) -> Any:
    up = current(st, a.get("id"))
    state = a.get("state")
    allowed = MOVES.get(up["state"], ())
    if state not in STATES or state not in allowed:
        raise BadInput(
            f"upgrade {up['id']} is {up['state']}: it cannot become {state!r}",
            field="state",
            allowed=list(allowed),
        )
    if state == "done" and up["at"] < len(up["domains"]):
        raise BadInput("the upgrade still has domains to do", field="state", allowed=list(allowed))
    reason = a.get("reason")
    before = _handing(st)
    up["state"] = state
    _withdraw(st, before)
    up["reason"] = str(reason)[:500] if state == "stopped" and reason else None
    text = {"stopped": f"stopped: {up['reason']}", "running": "resumed"}.get(state, state)
    note(st, up, text, severity="critical" if state == "stopped" else "info")
    return {"id": up["id"], "state": state}


HANDLERS: dict[str, dict[int, Any]] = {
    "upgrade_start": {1: upgrade_start_v1},
    "upgrade_step": {1: upgrade_step_v1},  # v2: nodeos/storage/upgrade_release.py
    "upgrade_state": {1: upgrade_state_v1},
}
