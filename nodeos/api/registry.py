"""Every public method of nodeosd, by name: the one table the dispatcher, the console's tests,
the API reference (docs/api.md) and the REST routes are checked against or built from."""

from __future__ import annotations

from . import auth, cluster, fleet, storage
from .spec import Method

API_VERSION = 1  # nodeos.rpc.framing.PROTOCOL_VERSION: the version a new method's `since` names


def _table(*groups: tuple[Method, ...]) -> dict[str, Method]:
    out: dict[str, Method] = {}
    for group in groups:
        for m in group:
            if m.name in out:
                raise RuntimeError(f"API method {m.name!r} is defined twice")
            out[m.name] = m
    return out


METHODS: dict[str, Method] = _table(fleet.METHODS, storage.METHODS, cluster.METHODS, auth.METHODS)


def get(name: str) -> Method | None:
    return METHODS.get(name)
