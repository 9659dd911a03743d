"""What placement is given and what it answers: candidates, slots, the refusal, naming helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from nodeos.errors import BadInput

SPREADS = ("node", "rack", "switch")
MAX_REPLICAS = 3


@dataclass(frozen=True, slots=True)
class PoolCandidate:
    node_id: int
    pool_id: str
    size_bytes: int
    free_bytes: int  # thin pools: free space as the node reported it
    healthy: bool  # False: a drive of the pool is failing / the pool is not ready


@dataclass(frozen=True, slots=True)
class NodeCandidate:
    node_id: int
    name: str
    labels: Mapping[str, str]  # e.g. {"rack": "a", "switch": "sw1"}
    schedulable: bool  # False: draining, down, witness, or data plane unhealthy
    pools: tuple[PoolCandidate, ...] = field(default=())


class ReplicaSlot(NamedTuple):
    """Where one replica goes. A named tuple rather than a dataclass: the index looks pools up
    by it, and a tuple hashes in C (the budget is a few µs per placement)."""

    node_id: int
    pool_id: str


class PlacementRefused(BadInput):
    """No valid placement exists (or a reserve does not fit); the message says why."""

    code = "placement_refused"


def human_size(n: int) -> str:
    """Binary units with a space ("100 GiB", "1.5 TiB"), exact when it can be."""
    for unit, mult in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= mult:
            return f"{n // mult} {unit}" if n % mult == 0 else f"{n / mult:.1f} {unit}"
    return f"{n} B"


def domain_of(node: NodeCandidate, spread: str) -> str:
    """The node's failure domain at a level: its name for `node`, else the label's value, or
    `node:<name>` when the node lacks the label (a domain of its own)."""
    if spread == "node":
        return node.name
    value = node.labels.get(spread)
    return value if value else f"node:{node.name}"
