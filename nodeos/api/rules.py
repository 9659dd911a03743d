"""Validators of request fields that the domain code keeps in another shape (whole-params
helpers): adapted here to `function(value, field)`, imported on first use by spec.Check."""

from __future__ import annotations

from typing import Any


def roll_timeout(value: Any, field: str) -> float:
    from nodeos.cluster.secretroll import rotate_timeout

    return rotate_timeout({field: value})


def node_ref(value: Any, field: str) -> int | str:
    from nodeos.errors import BadInput

    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadInput(f"{field} must be a node name or id", field=field)
    return value


def labels(value: Any, field: str) -> Any:
    """`set` is a map and `remove` a list: the console's one message for both."""
    from nodeos.errors import BadInput

    if not isinstance(value, dict if field == "set" else list):
        raise BadInput("labels are KEY=VALUE to set and KEY- to remove", field="labels")
    return value


def rebuild_mbps(value: Any, field: str) -> int:
    from nodeos.errors import BadInput
    from nodeos.storage.failover_map import REBUILD_MBPS_MAX

    if type(value) is not int or not 1 <= value <= REBUILD_MBPS_MAX:
        raise BadInput(
            f"rebuild limit {value!r} MB/s is out of range",
            field="rebuild_mbps",
            allowed=f"1-{REBUILD_MBPS_MAX}",
        )
    return value


def voter_policy(value: Any, field: str) -> Any:
    """One of `cluster set`'s settings, checked as the console checks it (nodeos/cluster/voters.py)."""
    from nodeos.cluster.voters import check_policy_args

    return check_policy_args({field: value})[field]


def kv_value(value: Any, field: str) -> Any:
    """A key/value space value (a string, an integer or bytes), as the map checks it."""
    from nodeos.cluster.map import check_kv_args

    if field == "expect":
        check_kv_args({"key": "k", "value": 0, "expect": value}, with_expect=True)
    else:
        check_kv_args({"key": "k", field: value})
    return value
