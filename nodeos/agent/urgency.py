"""Which changes of a node's report someone is waiting for (pure).

A report is a Raft command holding the node's whole actual state, so reports are spaced
(report.REPORT_MIN_INTERVAL_S) to bound what a busy node writes to the log. A change that an
operation waits on -- a volume, replica, pool, snapshot or published copy changing state, a
replica's size, hosts, epoch, legs or freeze -- goes at once: `nodeos volume create` returns
when the map holds the replica ready, and a lone node's create would otherwise wait out the
spacing after the previous report. Progress counters, capacity figures, connection lists,
error texts, listeners and drives change often and wait for the spacing.
"""

from __future__ import annotations

from typing import Any

_REPLICA_KEYS = ("state", "step", "size_bytes", "hosts", "epoch", "handed_off", "frozen", "members")
_PUBLISHED_KEYS = ("state", "sha256", "hosts")


def _pick(obj: Any, keys: tuple[str, ...]) -> tuple[Any, ...]:
    if not isinstance(obj, dict):
        return (obj,)
    return tuple(_freeze(obj.get(k)) for k in keys)


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def waited_for(body: dict[str, Any] | None) -> dict[str, Any]:
    """The parts of a report body an operation may be waiting for."""
    if not body:
        return {}
    return {
        "pools": {k: _pick(v, ("state",)) for k, v in (body.get("pools") or {}).items()},
        "replicas": {k: _pick(v, _REPLICA_KEYS) for k, v in (body.get("replicas") or {}).items()},
        "snapshots": {k: _pick(v, ("state",)) for k, v in (body.get("snapshots") or {}).items()},
        "published": {k: _pick(v, _PUBLISHED_KEYS) for k, v in (body.get("published") or {}).items()},
    }


def urgent(last: dict[str, Any] | None, body: dict[str, Any]) -> bool:
    """True when `body` changes something an operation may be waiting for since `last`."""
    return waited_for(last) != waited_for(body)


def roles(st: dict[str, Any], me: int) -> frozenset[tuple[Any, ...]]:
    """What the map asks of this node's replicated volumes that moves a primary: each volume's
    primary, epoch and hand-over, for the volumes placed on `me`. A change here is followed at
    once, not after the agent's poll gap (issue 29: a failover waited up to 0.1 s for it)."""
    out = set()
    for uuid, vol in st["volumes"].items():
        if int(vol.get("replicas") or 1) <= 1 or not any(s["node"] == me for s in vol["placement"]):
            continue
        ho = vol.get("handoff") or {}
        out.add((uuid, vol["primary"], vol["epoch"], ho.get("epoch"), ho.get("to")))
    return frozenset(out)
