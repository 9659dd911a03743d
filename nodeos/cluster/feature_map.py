"""The map's side of the cluster feature level (nodeos/cluster/features.py): `set_feature_level`.

The level is raised only once every member of the map reports a release that knows it, and never
lowered; the same check runs on the leader before it proposes (with the Raft members too), so a
refused raise normally never reaches the log.
"""

from __future__ import annotations

from typing import Any

from nodeos.cluster import events as map_events
from nodeos.cluster import features


def _set_feature_level_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    old = features.cluster_level(st)
    level = features.check_raise(st, args.get("level"))
    st["feature_level"] = level
    map_events.record(
        st,
        "feature_level_raised",
        f"cluster feature level {old} -> {level}: its commands may be used now",
    )
    return {"feature_level": level, "previous": old}


HANDLERS: dict[str, dict[int, Any]] = {"set_feature_level": {1: _set_feature_level_v1}}
