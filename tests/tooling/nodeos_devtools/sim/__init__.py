"""Deterministic whole-cluster simulator for the Raft core (see cluster.py).

`run_seed(seed, SimConfig(...))` runs one reproducible execution and returns a SeedResult;
`nodeos-sim` runs seed ranges from the command line.
"""

from .cluster import SeedResult, SimConfig, Simulation, run_seed
from .invariants import Violation

__all__ = ["SeedResult", "SimConfig", "Simulation", "Violation", "run_seed"]
