"""Test tooling, not the product: the deterministic cluster simulator (`sim/`, `nodeos-sim`) and the
linearizability checker (`lincheck/`, `nodeos-lincheck`). They drive the real cluster, storage and
control code from outside; no product module imports them (tests/unit/test_layers.py), so an
image can leave this package out."""
