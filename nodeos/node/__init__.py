"""The local node service: pools, volumes, snapshots, clones, hosts and grants on this node."""
