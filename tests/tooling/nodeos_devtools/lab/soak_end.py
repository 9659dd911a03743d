"""The end of a soak, once every fault is healed: everything healthy or gone (settle), everything
the soak made deleted (teardown), and nothing left behind on any node (clean). Each check has
its bound; what misses it is a violation naming the object or the leftover."""

from __future__ import annotations

import time
from typing import Any, Protocol

from nodeos_devtools.lab import soak_io
from nodeos_devtools.lab.lab import Lab
from nodeos_devtools.lab.soak_plan import Action, Shape
from nodeos_devtools.lab.soak_report import Report

# Seconds, scaled by the soak's bound_scale. A full copy of a 64 MiB replica took ~40-60 s under
# TCG (docs/benchmarks.md), a VM's boot several minutes: settling after the last heal gets 15.
SETTLE_S = 900
TEARDOWN_S = 900
# The node's garbage rule removes what it forgot after 60 s over 3 scans (docs/cluster.md,
# "Orphans"), a drive pulled leaves such; a deleting volume leaves the map once its nodes report.
LEFTOVER_S = 600
POOL = "soak"


class SoakLike(Protocol):
    lab: Lab
    report: Report
    scale: float
    host: str
    hostnqn: str
    step: int
    shape: Shape
    live: dict[str, Any]

    def nodeos(self, a: Action, args: list[str], bound: str, *, via: str = "") -> Any: ...

    def leftovers(self) -> list[str]: ...

    def violate(self, what: str) -> None: ...


def sick(row: dict[str, Any]) -> str:
    """Why a `volume list` row is not healthy ("" when it is): a snapshot ready; anything else
    ready with every replica in sync (serving, for a published volume)."""
    state, health = row.get("state"), str(row.get("health") or "")
    if row.get("kind") == "snapshot":
        return "" if state == "ready" else f"snapshot {row.get('name')} is {state}"
    good, _, of = health.partition("/")
    if state == "ready" and good and good == of:
        return ""
    return f"{row.get('kind')} {row.get('name')} is {state}, replicas in sync {health or '?'}"


def _rows(s: SoakLike, a: Action) -> list[dict[str, Any]] | None:
    ans = s.nodeos(a, ["volume", "list"], "list")
    return list(ans.doc) if ans.outcome == "ok" and isinstance(ans.doc, list) else None


def settle(s: SoakLike) -> None:
    """Every object healthy or gone within SETTLE_S of the last heal."""
    a = Action(s.step, "settle")
    deadline = time.monotonic() + SETTLE_S * s.scale
    t0 = time.monotonic()
    while True:
        rows = _rows(s, a)
        bad = (
            [w for w in (sick(r) for r in rows or []) if w]
            if rows is not None
            else ["volume list did not answer"]
        )
        if not bad:
            s.report.notes.append(f"healthy or gone {time.monotonic() - t0:.0f} s after the last heal")
            return
        if time.monotonic() > deadline:
            for w in bad:
                s.violate(f"not healthy {SETTLE_S * s.scale:.0f} s after every fault healed: {w}")
            return
        time.sleep(10)


# Deleted in this order: what depends on a snapshot before the snapshot.
ORDER = {"published": 0, "clone": 1, "volume": 2, "snapshot": 3}


def teardown(s: SoakLike) -> None:
    """Delete everything the cluster holds (the soak made all of it), the host, the pools."""
    a = Action(s.step, "teardown")
    for name, o in s.live.items():
        if getattr(o, "fio", False):
            soak_io.fio_kill(s.lab, s.host, name)
    s.lab.exec(s.host, ["nvme", "disconnect-all"], timeout=120)
    deadline = time.monotonic() + TEARDOWN_S * s.scale
    rows: list[dict[str, Any]] | None = None
    while time.monotonic() < deadline:
        rows = _rows(s, a)
        if rows == []:
            break
        for r in sorted(rows or [], key=lambda r: (ORDER.get(str(r.get("kind")), 9), str(r.get("name")))):
            if r.get("state") == "deleting":
                continue  # asked already: it leaves the map once its nodes report
            verb = "unpublish" if r.get("kind") == "published" else "delete"
            ans = s.nodeos(a, ["volume", verb, str(r["name"]), "--force"], verb)
            s.report.count("teardown", "ok" if ans.outcome == "ok" else "refused")
        time.sleep(5)
    if rows:
        s.violate(
            f"not deleted {TEARDOWN_S * s.scale:.0f} s into the teardown: {[r.get('name') for r in rows]}"
        )
    s.live.clear()
    ans = s.nodeos(a, ["host", "remove", s.hostnqn], "host")
    if ans.outcome != "ok":
        s.violate(f"host remove {s.hostnqn}: {ans.doc}")
    for vm in s.shape.storage:
        _pool_delete(s, a, vm, deadline)


def _pool_delete(s: SoakLike, a: Action, vm: str, deadline: float) -> None:
    """The pool goes once its last volume left the node's records: refused until then."""
    while True:
        ans = s.nodeos(a, ["pool", "delete", POOL], "pool", via=vm)
        code = ans.code if hasattr(ans, "code") else ""
        if ans.outcome == "ok" or code == "not_found":
            return
        if time.monotonic() > deadline:
            s.violate(f"pool {POOL} on {vm} not deleted: {str(ans.doc)[:300]}")
            return
        time.sleep(10)


def clean(s: SoakLike) -> None:
    """No leftover on any node within LEFTOVER_S of the teardown."""
    deadline = time.monotonic() + LEFTOVER_S * s.scale
    t0 = time.monotonic()
    while True:
        found = s.leftovers()
        if not found:
            s.report.notes.append(f"no leftover on any node {time.monotonic() - t0:.0f} s after the teardown")
            return
        if time.monotonic() > deadline:
            for f in found:
                s.violate(f"leftover {LEFTOVER_S * s.scale:.0f} s after the teardown: {f}")
            return
        time.sleep(15)
