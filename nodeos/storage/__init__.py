"""The storage domain: pools, volumes, snapshots, hosts and grants, replica placement, capacity,
failover, replacement and publish decisions, and the storage sections of the replicated cluster
map (pure command handlers that nodeos/cluster/map.py registers).

It sits on the cluster's leaf services only (events, feature levels, the command list, data
keys); the cluster's consensus, transport and service never come in here, and nothing here
imports the control plane above it (tests/unit/test_layers.py)."""
