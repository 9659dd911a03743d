"""schemathesis hooks for tests/process/test_rest_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

Two shapings of generated requests, each because what it avoids is not a schema property: a
`timeout` under a second (a deadline no leader can meet is answered `not_leader`, 503, by
design) and `follow` (a long poll holds its request up to `timeout`). One check of our own:
every 4xx error names the field at fault."""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    t = body.get("timeout")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t < 1:
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
