"""Deliberately broken variants of the failover map's decisions, for the self-test of the failover
map invariants (epochcheck.py) only: each is the real function of nodeos/storage/failover_map.py or
failover_handlers.py with one line changed, patched in for one run. Production code never sets these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nodeos.cluster import map as map_mod
from nodeos.storage import failover
from nodeos.storage import failover_map as fm

EPOCH_BROKEN_VARIANTS = {
    "settle_any_epoch": "the in-sync set is settled from the primary's report without comparing its epoch",
    "in_sync_while_down": "a replica the primary's mirror calls in sync rejoins the in-sync set while down",
    "handed_off_any_epoch": "a hand-over flag is taken without its epoch (any epoch's hand-over counts)",
    "failover_keeps_epoch": "volume_failover moves the primary without raising the epoch",
}

_ORIGINAL: dict[str, Any] = {
    "settle_in_sync": fm.settle_in_sync,
    "handed_off": failover.handed_off,
    "volume_failover": dict(map_mod.HANDLERS["volume_failover"]),  # every version
}


def _settle_broken(st: dict[str, Any], vol: dict[str, Any], *, check_epoch: bool, check_up: bool) -> None:
    """fm.settle_in_sync, with its epoch or its health test left out."""
    if int(vol.get("replicas") or 1) <= 1 or vol["state"] not in ("ready", "creating"):
        return
    prim = vol["primary"]
    rep = ((st["reports"].get(prim) or {}).get("replicas") or {}).get(vol["uuid"])
    stale = check_epoch and rep is not None and rep.get("epoch", vol["epoch"]) != vol["epoch"]
    if not rep or stale or rep.get("state") == "failed":
        return
    members = rep.get("members") or {}
    cur = fm.in_sync_of(vol)
    for slot in vol["placement"]:
        nid = slot["node"]
        state = members.get(nid)
        if nid == prim or state is None:
            continue
        if state == "in-sync" and nid not in cur and (not check_up or fm.health_of(st, nid) == "up"):
            fm._set_in_sync(vol, [*cur, nid])
            cur = fm.in_sync_of(vol)
        elif state in fm.MEMBER_OUT and nid in cur and vol["state"] == "ready":
            fm.drop_in_sync(st, vol, nid, None)
            cur = fm.in_sync_of(vol)
    if vol.get("in_sync") is None:
        vol["in_sync"] = cur


def settle_any_epoch(st: dict[str, Any], vol: dict[str, Any]) -> None:
    _settle_broken(st, vol, check_epoch=False, check_up=True)


def settle_in_sync_while_down(st: dict[str, Any], vol: dict[str, Any]) -> None:
    _settle_broken(st, vol, check_epoch=True, check_up=False)


def handed_off_any_epoch(st: dict[str, Any], vol: dict[str, Any]) -> bool:
    rep = ((st["reports"].get(vol["primary"]) or {}).get("replicas") or {}).get(vol["uuid"]) or {}
    return rep.get("handed_off") is not None


def failover_keeps_epoch(version: int) -> Any:
    def handler(st: dict[str, Any], args: dict[str, Any]) -> Any:
        vol = st["volumes"].get(args.get("uuid"))
        out = _ORIGINAL["volume_failover"][version](st, args)
        if vol is not None and "epoch" in out:
            vol["epoch"] = out["epoch"] = out["epoch"] - 1  # the move without its epoch
        return out

    return handler


@contextlib.contextmanager
def epoch_bug(variant: str | None) -> Iterator[None]:
    """Patch `variant` into the real map and controller code for the block."""
    try:
        if variant == "settle_any_epoch":
            fm.settle_in_sync = settle_any_epoch
        elif variant == "in_sync_while_down":
            fm.settle_in_sync = settle_in_sync_while_down
        elif variant == "handed_off_any_epoch":
            failover.handed_off = handed_off_any_epoch  # decide() calls it from failover's namespace
        elif variant == "failover_keeps_epoch":
            for v in _ORIGINAL["volume_failover"]:
                map_mod.HANDLERS["volume_failover"][v] = failover_keeps_epoch(v)
        yield
    finally:
        fm.settle_in_sync = _ORIGINAL["settle_in_sync"]
        failover.handed_off = _ORIGINAL["handed_off"]
        map_mod.HANDLERS["volume_failover"].update(_ORIGINAL["volume_failover"])
