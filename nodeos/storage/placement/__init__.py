"""Replica placement (pure): see `index.py` for the rules, `levels.py` for how it stays fast."""

from nodeos.storage.placement.index import CapacityIndex
from nodeos.storage.placement.model import (
    MAX_REPLICAS,
    SPREADS,
    NodeCandidate,
    PlacementRefused,
    PoolCandidate,
    ReplicaSlot,
    domain_of,
    human_size,
)

__all__ = [
    "MAX_REPLICAS",
    "SPREADS",
    "CapacityIndex",
    "NodeCandidate",
    "PlacementRefused",
    "PoolCandidate",
    "ReplicaSlot",
    "domain_of",
    "human_size",
]
