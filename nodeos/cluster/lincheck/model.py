"""Sequential specifications that histories are checked against.

A model is pure: `step(state, op)` says whether `op`, applied to `state` with the
outcome the history recorded, is possible, and what the state becomes. States must be
hashable because the search caches (linearized set, state) pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from nodeos.cluster.lincheck.history import UNKNOWN, Op


@dataclass(frozen=True)
class Model:
    name: str
    init: Hashable
    step: Callable[[Any, Op], tuple[bool, Any]]
    functions: frozenset[str]


def _register_step(state: Any, op: Op) -> tuple[bool, Any]:
    """A compare-and-set register that starts empty (None)."""
    if op.f == "read":
        return (op.output is UNKNOWN or op.output == state), state
    if op.f == "write":
        return True, op.value
    # cas [from, to]: succeeds only when the value is `from`; a failed cas observed `!= from`.
    frm, to = op.value
    if state == frm:
        return op.output is UNKNOWN or op.output is True, to
    return op.output is UNKNOWN or op.output is False, state


def _kv_step(state: Any, op: Op) -> tuple[bool, Any]:
    """One key of the key-value store: the value starts as the empty string."""
    if op.f == "get":
        return (op.output is UNKNOWN or op.output == state), state
    if op.f == "put":
        return True, op.value
    return True, state + op.value  # append


REGISTER = Model("register", None, _register_step, frozenset({"read", "write", "cas"}))
KV = Model("kv", "", _kv_step, frozenset({"get", "put", "append"}))
MODELS: dict[str, Model] = {m.name: m for m in (REGISTER, KV)}
