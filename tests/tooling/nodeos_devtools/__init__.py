"""The test tooling of nodeos, a distribution of its own (nodeos-devtools, tests/tooling/pyproject.toml)
that the dev install brings: the VM lab and the appliance image build (`lab/`, `nodeos-lab`), the
deterministic cluster simulator (`sim/`, `nodeos-sim`) and the linearizability checker
(`lincheck/`, `nodeos-lincheck`). They drive the real cluster, storage and control code from
outside; no product module imports them (tests/unit/test_layers.py), and neither the product
distribution nor the appliance image carries them."""
