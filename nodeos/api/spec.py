"""What one API method is: its definition record and the markers its request types carry.

A request is a `msgspec.Struct`; each field's type says what the daemon accepts (the types the
API reference and the OpenAPI document are made from). A field whose rule is more than a type
(a name's characters, a size with a unit, an NQN) carries a `Check` naming the validator that
owns the rule (nodeos/validate.py and friends), so the operator's message and its `allowed`
values stay the ones the console has always printed. Validators are named as "module:function"
and imported on first use: defining the API imports no storage or cluster code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

# Where a method runs: on the node whose console asked ("node"), or forwarded to the Raft leader
# ("leader"; reads there run after a read barrier, writes are one map command).
Runs = Literal["node", "leader"]

# Error codes a client can meet on every method (nodeos/errors.py, nodeos/rpc/client.py).
COMMON_ERRORS: tuple[str, ...] = ("bad_input", "failed")
# What a method forwarded to the leader may answer besides its own errors
# (nodeos/cluster/errors.py): nothing done (`not_leader`) or maybe applied (`unknown_outcome`).
LEADER_ERRORS: tuple[str, ...] = ("not_leader", "unknown_outcome")


class Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """Base of every request. Unknown fields are ignored: a client one version newer may send an
    optional field this daemon does not know yet (docs/api.md, "Compatibility")."""


class NoParams(Request):
    """A method without parameters."""


class Reply(msgspec.Struct, kw_only=True):
    """Base of a typed reply. A reply may carry more fields than its type names (a newer daemon
    adds optional ones): clients ignore what they do not know."""


@dataclass(frozen=True)
class Check:
    """The validator that owns a field's rule: `target` is "module:function", called as
    `function(value, field)` (or `function(value)` with `with_field=False`); it raises BadInput
    with the operator's message or returns the value. `field` renames the field in errors where
    the console has always named it differently from the request key (host.add's `nqn` is
    reported as `host`)."""

    target: str
    field: str | None = None
    with_field: bool = True

    def run(self, value: Any, name: str) -> Any:
        module, attr = self.target.split(":")
        fn: Callable[..., Any] = getattr(importlib.import_module(module), attr)
        return fn(value, self.field or name) if self.with_field else fn(value)


@dataclass(frozen=True)
class Method:
    """One public method of the daemon, defined once.

    `console`: the `nodeos` command that calls it ("volume create"; None with `why_no_console`
    for probes and test hooks). `since`: the API version (nodeos.rpc.framing.PROTOCOL_VERSION)
    that introduced it. `only_with`: a daemon option without which the method is absent (test
    hooks). `write`: the method changes state (the REST endpoint needs the admin role for it).
    """

    name: str
    summary: str
    request: type[Request]
    reply: Any
    runs: Runs
    errors: tuple[str, ...] = ()
    write: bool = False
    since: int = 1
    console: str | None = None
    why_no_console: str | None = None
    only_with: str | None = None
    notes: str = ""
    all_errors: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        extra = LEADER_ERRORS if self.runs == "leader" else ()
        codes = tuple(dict.fromkeys((*COMMON_ERRORS, *self.errors, *extra)))
        object.__setattr__(self, "all_errors", codes)
        if (self.console is None) == (self.why_no_console is None):
            raise ValueError(f"{self.name}: give exactly one of console and why_no_console")
