"""Linearizability search (Wing & Gong, with Lowe's just-in-time linearization and caching).

The history is split per key first (P-compositionality: a history is linearizable iff
each key's sub-history is). For one key, the calls and returns form a doubly linked list
in real-time order. The search walks it: at a call it tries to linearize that operation
now (the model must accept it in the current state); it then removes the call and its
return from the list and starts again from the head. Reaching a return whose call is
still in the list means that operation's deadline passed: undo the last choice. Visited
(set of linearized operations, state) pairs are cached, so each is explored once.

Operations with an unknown outcome get a return after every known event: they may be
linearized anywhere after their call, and one linearized at the very end is
indistinguishable from one that never happened.

The search is exponential in the worst case, so each key has its own budget: `timeout`
seconds and `max_states` cached states (the cache holds one 64-bit hash per visited
pair, never the states, so memory stays bounded: about 60 bytes a state). A key that
runs out of budget is "unknown" rather than a guess. Keys are checked smallest first and
the check stops at the first key that is not linearizable: one violation decides the
whole history, and small keys decide fastest (Jepsen's 50-client key-value history with
a violation: the first key in file order takes minutes and gigabytes, the smallest one
a tenth of a second).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from nodeos_devtools.lincheck.history import Op
from nodeos_devtools.lincheck.model import Model

LINEARIZABLE = "linearizable"
NOT_LINEARIZABLE = "not-linearizable"
UNKNOWN_VERDICT = "unknown"


@dataclass
class Result:
    verdict: str
    ops: int
    partitions: int
    failed_key: Any = None
    explored: int = 0
    detail: str = ""
    per_key: dict[Any, str] = field(default_factory=dict)


DEFAULT_MAX_STATES = 2_000_000  # per key: ~120 MB of cache at most


class _OutOfBudget(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _check_partition(
    model: Model, ops: list[Op], deadline: float | None, max_states: int = DEFAULT_MAX_STATES
) -> tuple[bool, int]:
    """Return (linearizable, states explored) for one key's operations."""
    n = len(ops)
    if n == 0:
        return True, 0
    end = max((op.ret for op in ops if op.ret is not None), default=0) + 1
    # Event order: by position; unknown returns after everything, in call order. A call
    # and a return never share a position in a parsed history.
    events = []
    for i, op in enumerate(ops):
        events.append((op.call, 0, i))
        events.append((op.ret if op.ret is not None else end + op.call, 1, i))
    events.sort()
    size = len(events)
    head = size  # sentinel node
    nxt = [0] * (size + 1)
    prv = [0] * (size + 1)
    is_call = [False] * size
    opid = [0] * size
    ret_node = [0] * n
    call_node = [0] * n
    for node, (_, kind, i) in enumerate(events):
        is_call[node] = kind == 0
        opid[node] = i
        if kind == 0:
            call_node[i] = node
        else:
            ret_node[i] = node
    order = [head, *range(size)]
    for a, b in zip(order, [*order[1:], -1], strict=True):
        nxt[a] = b
        if b >= 0:
            prv[b] = a
    prv[head] = -1

    def unlink(x: int) -> None:
        p, q = prv[x], nxt[x]
        nxt[p] = q
        if q >= 0:
            prv[q] = p

    def relink(x: int) -> None:
        p, q = prv[x], nxt[x]
        nxt[p] = x
        if q >= 0:
            prv[q] = x

    step = model.step
    state: Any = model.init
    linearized = 0
    # Hashes, not (set, state) pairs: a kv state is a string that grows with every append,
    # and keeping them all is what ran a 50-client history out of memory. A 64-bit
    # collision (which could only prune a branch wrongly) is ~1e-7 likely at the cap.
    cache: set[int] = set()
    stack: list[tuple[int, Any]] = []
    entry = nxt[head]
    explored = 0
    while nxt[head] >= 0:
        explored += 1
        if deadline is not None and explored % 4096 == 0 and time.monotonic() > deadline:
            raise _OutOfBudget("time")
        if entry >= 0 and is_call[entry]:
            i = opid[entry]
            ok, new_state = step(state, ops[i])
            if ok:
                new_lin = linearized | (1 << i)
                key = hash((new_lin, new_state))
                if key not in cache:
                    if len(cache) >= max_states:
                        raise _OutOfBudget("states")
                    cache.add(key)
                    stack.append((entry, state))
                    state, linearized = new_state, new_lin
                    unlink(entry)
                    unlink(ret_node[i])
                    entry = nxt[head]
                    continue
            entry = nxt[entry]
        else:
            # A return whose call is not yet linearized: backtrack.
            if not stack:
                return False, explored
            top, state = stack.pop()
            i = opid[top]
            linearized &= ~(1 << i)
            relink(ret_node[i])
            relink(top)
            entry = nxt[top]
    return True, explored


def check(
    model: Model, ops: list[Op], timeout: float | None = None, max_states: int = DEFAULT_MAX_STATES
) -> Result:
    """Check a whole history key by key, smallest key first; stop at the first violation.

    `timeout` (seconds) and `max_states` are each key's own budget.
    """
    by_key: dict[Any, list[Op]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    result = Result(LINEARIZABLE, len(ops), len(by_key))
    unknown: list[str] = []
    for key, part in sorted(by_key.items(), key=lambda kv: (len(kv[1]), repr(kv[0]))):
        bad = model.impossible_read(part) if model.impossible_read else None
        if bad is not None:
            result.per_key[key] = NOT_LINEARIZABLE
            result.verdict = NOT_LINEARIZABLE
            result.failed_key = key
            result.detail = (
                f"key {key!r}: {bad.f} by process {bad.process!r} returned {bad.output!r},"
                " a value no write in the history could produce"
            )
            return result
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            ok, explored = _check_partition(model, part, deadline, max_states)
        except _OutOfBudget as out:
            result.per_key[key] = UNKNOWN_VERDICT
            budget = f"{timeout} s" if out.why == "time" else f"{max_states} states"
            unknown.append(f"key {key!r} ({len(part)} operations) used its budget of {budget}")
            continue
        result.explored += explored
        result.per_key[key] = LINEARIZABLE if ok else NOT_LINEARIZABLE
        if not ok:
            result.verdict = NOT_LINEARIZABLE
            result.failed_key = key
            result.detail = f"key {key!r}: no linearization of its {len(part)} operations"
            return result
    if unknown:
        result.verdict = UNKNOWN_VERDICT
        result.detail = "search stopped: " + "; ".join(unknown)
    return result
