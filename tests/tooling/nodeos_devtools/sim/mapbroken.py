"""Deliberately broken cluster-map variants, for the map workload's self-test only.

Each one patches one known bug into the real map or decision code for the duration of one
simulated run (`SimConfig.broken`), so tests prove the map checks (mapcheck.py) catch it.
Production code never sets these. docs/testing.md lists what catches each.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from nodeos.cluster import map as map_mod
from nodeos.cluster import request_log
from nodeos.control import decide
from nodeos.storage import create_replace_map, pool_index, snapshot_map
from nodeos.storage import storage_map as sm
from nodeos.storage.placement import CapacityIndex

MAP_BROKEN_VARIANTS = {
    "map_name_not_freed": "a dropped volume's name stays taken",
    "map_apply_clock": "volume_create records the applying node's clock",
    "map_apply_dict_order": "volume_create orders the replicas as the pools dict is ordered",
    "map_ready_early": "a volume turns ready once any one replica is in-sync",
    "map_placement_ignores_spread": "placement spreads by node whatever spread was asked",
    "map_grant_outlives_host": "host_remove forgets to check the host's grants",
    "map_restore_drops_snapshots": "restoring a map snapshot loses the snapshots section",
    "map_freeze_never_cleared": "a snapshot dropped, deleted or made ready leaves its volume frozen",
    "map_create_ignores_room": "volume_create applies without re-checking its pools' room",
    "map_request_applied_twice": "a console's repeated request is applied again (not answered from the map)",
    "map_create_replace_keeps_epoch": "a new volume's primary slot re-placed without a new epoch",
    "map_index_misses_create_replace": "the pool index takes a new volume's re-placed slot for no change",
    "map_unlisted_ignores_reports": "the index of unlisted volumes misses a report that stops listing one",
    "map_command_untyped": "volume_create's decision sends its QoS IOPS as text (stored as is)",
}


def _create_replace_keeps_epoch(st: dict[str, Any], args: dict[str, Any]) -> Any:
    vol = st["volumes"].get(args.get("uuid"))
    epoch = None if vol is None else vol["epoch"]
    out = _ORIGINAL["create_replace"](st, args)
    if vol is not None:
        vol["epoch"] = epoch  # the secondaries never learn to follow the new primary
    return out


def _volume_create_untyped(st: dict[str, Any], p: dict[str, Any], uuid: str) -> Any:
    cmd, args = _ORIGINAL["decide_create"](st, p, uuid)
    return cmd, {**args, "qos_iops": str(args.get("qos_iops") or 1000)}


def _drop_volume_keeps_name(st: dict[str, Any], vol: dict[str, Any]) -> None:
    del st["volumes"][vol["uuid"]]
    st["paths"].pop(vol["uuid"], None)


def _volume_create_with_clock(st: dict[str, Any], args: dict[str, Any]) -> Any:
    out = _ORIGINAL["volume_create"](st, args)
    st["volumes"][out["uuid"]]["created"] = time.time_ns()
    return out


def _placement_in_pool_order(st: dict[str, Any], placement: Any, field: str = "placement") -> list[Any]:
    slots = _ORIGINAL["check_placement"](st, placement, field)
    where = [(p["node"], p["pool_id"]) for p in st["pools"].values()]
    return sorted(slots, key=lambda s: where.index((s["node"], s["pool_id"])))


def _settle_volume_any_in_sync(st: dict[str, Any], vol: dict[str, Any]) -> None:
    _ORIGINAL["settle_volume"](st, vol)
    if vol["state"] == "creating" and any(
        sm.replica_view(st, vol, s["node"])["state"] == "in-sync" for s in vol["placement"]
    ):
        vol["state"] = "ready"


def _place_by_node(
    self: CapacityIndex, key: str, size_bytes: int, replicas: int, spread: str = "node", *args: Any, **kw: Any
) -> Any:
    return _ORIGINAL["place"](self, key, size_bytes, replicas, "node", *args, **kw)


def _host_remove_unchecked(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nqn = sm.req(args, "nqn", str)
    if nqn not in st["hosts"]:
        raise sm.NotFound(f"host {nqn!r} is not registered", field="host")
    del st["hosts"][nqn]
    return {"nqn": nqn, "removed": True}


def _restore_without_snapshots(self: map_mod.ClusterMap, data: bytes, index: int | None = None) -> None:
    _ORIGINAL["restore"](self, data, index)
    self.state["snapshots"] = {}


_ORIGINAL: dict[str, Any] = {
    "volume_create": sm.volume_create_v1,
    "check_placement": sm.check_placement,
    "settle_volume": sm._settle_volume,
    "place": CapacityIndex.place,
    "restore": map_mod.ClusterMap.restore,
    "create_replace": create_replace_map.volume_create_replace_v1,
    "decide_create": decide.volume_create,
}


@contextlib.contextmanager
def map_bug(variant: str | None) -> Iterator[None]:
    """Patch `variant` in for the block (nothing for None or a Raft variant)."""
    patches: list[tuple[Any, str, Any]] = []
    if variant == "map_name_not_freed":
        patches.append((sm, "_drop_volume", _drop_volume_keeps_name))
    elif variant == "map_apply_clock":
        patches.append((map_mod.HANDLERS["volume_create"], 1, _volume_create_with_clock))
    elif variant == "map_apply_dict_order":
        patches.append((sm, "check_placement", _placement_in_pool_order))
    elif variant == "map_ready_early":
        patches.append((sm, "_settle_volume", _settle_volume_any_in_sync))
    elif variant == "map_placement_ignores_spread":
        patches.append((CapacityIndex, "place", _place_by_node))
    elif variant == "map_grant_outlives_host":
        patches.append((map_mod.HANDLERS["host_remove"], 1, _host_remove_unchecked))
    elif variant == "map_freeze_never_cleared":
        patches.append((snapshot_map, "clear_freeze", lambda st, snap: None))
    elif variant == "map_create_ignores_room":
        patches.append((sm, "check_room", lambda st, name, size, slots: None))
    elif variant == "map_create_replace_keeps_epoch":
        patches.append((map_mod.HANDLERS["volume_create_replace"], 1, _create_replace_keeps_epoch))
    elif variant == "map_index_misses_create_replace":
        patches.append((pool_index, "PLACING", pool_index.PLACING - {"volume_create_replace"}))
        patches.append((pool_index, "KEEPS", pool_index.KEEPS | {"volume_create_replace"}))
    elif variant == "map_unlisted_ignores_reports":
        patches.append((pool_index.PoolIndex, "_relist", lambda self, st, nid: None))
    elif variant == "map_request_applied_twice":
        patches.append((request_log, "recorded", lambda st, rid: None))
    elif variant == "map_command_untyped":
        patches.append((decide, "volume_create", _volume_create_untyped))
    elif variant == "map_restore_drops_snapshots":
        patches.append((map_mod.ClusterMap, "restore", _restore_without_snapshots))
    saved = [(obj, key, _get(obj, key)) for obj, key, _ in patches]
    try:
        for obj, key, new in patches:
            _set(obj, key, new)
        yield
    finally:
        for obj, key, old in saved:
            _set(obj, key, old)


def _get(obj: Any, key: Any) -> Any:
    return obj[key] if isinstance(obj, dict) else getattr(obj, key)


def _set(obj: Any, key: Any, value: Any) -> None:
    if isinstance(obj, dict):
        obj[key] = value
    else:
        setattr(obj, key, value)
