"""schemathesis hooks for tests/process/test_rest_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

Two shapings of generated requests, each because what it avoids is not a schema property: a
`timeout` under a second that the method's type admits (a deadline no leader can meet is answered
`not_leader`, 503, by design; one the type refuses is left for the daemon to refuse) and `follow`
(a long poll holds its request up to `timeout`). One check of our own: every 4xx error names the
field at fault."""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

import schemathesis

from nodeos.api import openapi
from nodeos.api.check import unwrap


@cache
def _timeout_bounds(path: str) -> tuple[float | None, float | None] | None:
    """(gt, ge) of the `timeout` field of the method at `path`, None when it has none."""
    m = openapi.routes().get(path)
    hints = typing.get_type_hints(m.request, include_extras=True) if m is not None else {}
    if "timeout" not in hints:
        return None
    meta = unwrap(hints["timeout"])[2]
    return (meta.gt, meta.ge) if meta is not None else (None, None)


def _admitted(path: str, t: float) -> bool:
    bounds = _timeout_bounds(path)
    if bounds is None:
        return False
    gt, ge = bounds
    return (gt is None or t > gt) and (ge is None or t >= ge)


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    t = body.get("timeout")
    path = getattr(getattr(context, "operation", None), "path", "")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t < 1 and _admitted(path, t):
        body = {**body, "timeout": 5}
    if body.get("follow") is True:
        body = {**body, "follow": False}
    return body


@schemathesis.check
def every_4xx_names_the_field(ctx: Any, response: Any, case: Any) -> bool | None:
    if 400 <= response.status_code < 500:
        err = (response.json() or {}).get("error") or {}
        if not err.get("field"):
            raise AssertionError(
                f"{response.status_code} {err.get('code')} names no field: {err.get('message')}"
            )
    return None
