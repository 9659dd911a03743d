"""Sequential specifications that histories are checked against.

A model is pure: `step(state, op)` says whether `op`, applied to `state` with the
outcome the history recorded, is possible, and what the state becomes. States must be
hashable because the search caches (linearized set, state) pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from nodeos_devtools.lincheck.history import UNKNOWN, Op


@dataclass(frozen=True)
class Model:
    name: str
    init: Hashable
    step: Callable[[Any, Op], tuple[bool, Any]]
    functions: frozenset[str]
    # A cheap, sound refutation before the search: a read no write in the history could
    # produce (the search would find that too, but only after trying every order, which
    # with many unknown outcomes runs out of budget).
    impossible_read: Callable[[list[Op]], Op | None] | None = None


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


def _register_impossible_read(ops: list[Op]) -> Op | None:
    values = [None, *(op.value for op in ops if op.f == "write")]
    values += [op.value[1] for op in ops if op.f == "cas"]
    return next(
        (op for op in ops if op.f == "read" and op.output is not UNKNOWN and op.output not in values), None
    )


def _kv_reachable(value: str, puts: set[str], appends: set[str]) -> bool:
    """Whether `value` is a put value (or "") followed by append values, each usable any
    number of times (an over-approximation of what the history can build: sound to refute)."""
    n = len(value)
    reach = [value[:i] in puts for i in range(n + 1)]
    for i in range(n + 1):
        if reach[i]:
            for a in appends:
                if a and value.startswith(a, i):
                    reach[i + len(a)] = True
    return reach[n]


def _kv_impossible_read(ops: list[Op]) -> Op | None:
    writes = [op for op in ops if op.f in ("put", "append")]
    if not all(isinstance(op.value, str) for op in writes):
        return None  # values the string model does not build: leave them to the search
    puts = {"", *(op.value for op in writes if op.f == "put")}
    appends = {op.value for op in writes if op.f == "append"}
    for op in ops:
        out = op.output
        if op.f == "get" and isinstance(out, str) and not _kv_reachable(out, puts, appends):
            return op
    return None


REGISTER = Model(
    "register", None, _register_step, frozenset({"read", "write", "cas"}), _register_impossible_read
)
KV = Model("kv", "", _kv_step, frozenset({"get", "put", "append"}), _kv_impossible_read)
MODELS: dict[str, Model] = {m.name: m for m in (REGISTER, KV)}
