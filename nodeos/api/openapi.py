"""The REST endpoint's routes and its OpenAPI 3.1 document, made from the definitions.

Every method (test hooks aside) is `POST /api/v1/<name, dots as slashes>` with its request as
a JSON body; one that needs no parameter and changes nothing answers `GET` too. A reply is the
method's result as JSON (200), or `{"error": {code, message, field?, allowed?}}` with the
status its code maps to (HTTP_STATUS): the console's codes, unchanged.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .registry import API_VERSION, METHODS
from .spec import Method

BASE = f"/api/v{API_VERSION}"

# Error code -> HTTP status. 4xx: the request (or the caller) is at fault, nothing was done;
# `failed`: a valid request the cluster's state does not allow now (409); 5xx: the node or the
# cluster could not answer (an `internal error` is a bug: 500).
HTTP_STATUS: dict[str, int] = {
    "bad_input": 400,
    "bad_frame": 400,
    "bad_version": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "permission_denied": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "already_exists": 409,
    "placement_refused": 409,
    "failed": 409,
    "too_large": 413,
    "not_supported": 422,
    "internal": 500,
    "environment": 500,
    "no_space": 507,
    "corrupt_record": 500,
    "not_leader": 503,
    "peer_unreachable": 503,
    "busy": 503,
    "unknown_outcome": 504,
    "timeout": 504,
}


def status_of(code: str) -> int:
    return HTTP_STATUS.get(code, 409)


def routes() -> dict[str, Method]:
    """Path under BASE -> method."""
    return {"/" + m.name.replace(".", "/"): m for m in METHODS.values() if m.only_with is None}


def takes_get(m: Method) -> bool:
    return not m.write and not msgspec.structs.fields(m.request)


_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": "string"},
                "allowed": {},
            },
        }
    },
}


def document() -> dict[str, Any]:
    table = routes()
    methods = list(table.values())
    # One call for every type: shared types become one component each, replies included.
    refs, schemas = msgspec.json.schema_components(
        [m.request for m in methods] + [m.reply for m in methods], ref_template="#/components/schemas/{name}"
    )
    reply_schema = {m.name: refs[len(methods) + i] for i, m in enumerate(methods)}
    schemas = {**schemas, "Error": _ERROR}
    paths: dict[str, Any] = {}
    for path, m in sorted(table.items()):
        paths[path] = {"post": _operation(m, reply_schema[m.name], with_body=True)}
        if takes_get(m):
            paths[path]["get"] = _operation(m, reply_schema[m.name], with_body=False)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "nodeos",
            "version": str(API_VERSION),
            "description": "The nodeosd API over HTTPS (docs/api.md): one method per route.",
        },
        "servers": [{"url": BASE}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(m: Method, reply: dict[str, Any], with_body: bool) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    codes = sorted({status_of(c) for c in (*m.all_errors, "unauthorized", "forbidden")})
    responses: dict[str, Any] = {
        "200": {
            "description": "the method's result",
            "content": {"application/json": {"schema": reply}},
        },
        **{str(s): {"description": "an error (the console's codes)", **error} for s in codes},
    }
    op: dict[str, Any] = {
        "operationId": m.name + ("" if with_body else ".get"),
        "summary": m.summary,
        "responses": responses,
        "x-nodeos-runs": m.runs,
        "x-nodeos-since": m.since,
        "x-nodeos-role": "admin" if m.write else "read-only",
    }
    if with_body:
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{m.request.__name__}"}}
            },
        }
    return op
