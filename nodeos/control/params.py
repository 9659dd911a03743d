"""The control API's common request parameters, checked on the node whose console asked."""

from __future__ import annotations

from typing import Any

from nodeos import validate
from nodeos.errors import BadInput
from nodeos.storage.host_map import MAX_HOSTS_AT_ONCE

# How long an operation waits for the map when its caller does not say (`wait`): less than the
# console's own timeout (nodeos/rpc/client.py DEFAULT_TIMEOUT_S), so the console always gets the
# daemon's answer (what is still pending) rather than a timeout of its own.
DEFAULT_WAIT_S = 100.0


def param(params: dict[str, Any], key: str, field: str | None = None) -> Any:
    if params.get(key) is None:
        raise BadInput(f"{field or key} is required", field=field or key)
    return params[key]


def host_list(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_HOSTS_AT_ONCE:
        raise BadInput(
            f"{field} must list 1 to {MAX_HOSTS_AT_ONCE} host NQNs",
            field=field,
            allowed=f"1-{MAX_HOSTS_AT_ONCE}",
        )
    return list(dict.fromkeys(validate.host_nqn(h, field) for h in value))


def wait_param(params: dict[str, Any]) -> float:
    """`wait`, checked at the dispatcher (nodeos/api/fields.py, Wait)."""
    return float(params.get("wait", DEFAULT_WAIT_S))


def replicas_param(v: Any) -> int:
    if v is None:
        return 1
    if type(v) is not int:
        raise BadInput(f"replicas must be 1, 2 or 3, not {v!r}", field="replicas", allowed=[1, 2, 3])
    return validate.replicas(v)
