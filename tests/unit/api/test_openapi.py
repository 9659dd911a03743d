"""The REST routes and the OpenAPI 3.1 document are made from the definitions: every method
(test hooks aside) has its route, every reference resolves, every error status is declared."""

from __future__ import annotations

import json
from typing import Any

from nodeos.api import openapi
from nodeos.api.registry import METHODS


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_method_but_the_test_hooks_has_its_route_once() -> None:
    routes = openapi.routes()
    served = {m.name for m in routes.values()}
    assert served == {m.name for m in METHODS.values() if m.only_with is None}
    assert len(routes) == len(served)


def test_the_document_is_openapi_3_1_and_every_reference_resolves() -> None:
    doc = openapi.document()
    json.dumps(doc)  # plain JSON
    assert doc["openapi"] == "3.1.0" and doc["servers"] == [{"url": "/api/v1"}]
    schemas = doc["components"]["schemas"]
    for ref in _refs(doc["paths"]) + _refs(schemas):
        assert ref.startswith("#/components/schemas/") and ref.split("/")[-1] in schemas, ref
    ops = [op for item in doc["paths"].values() for op in item.values()]
    assert len({op["operationId"] for op in ops}) == len(ops)


def test_writes_need_the_admin_role_and_declare_401_and_403() -> None:
    doc = openapi.document()
    for path, m in openapi.routes().items():
        op = doc["paths"][path]["post"]
        assert op["x-nodeos-role"] == ("admin" if m.write else "read-only")
        assert {"200", "400", "401", "403"} <= set(op["responses"])
        assert ("get" in doc["paths"][path]) == openapi.takes_get(m)


def test_request_type_names_are_unique() -> None:
    names = [m.request.__name__ for m in METHODS.values()]
    by_name = {n: {m.request for m in METHODS.values() if m.request.__name__ == n} for n in names}
    assert all(len(types) == 1 for types in by_name.values()), by_name
