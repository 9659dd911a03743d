"""First-boot provisioning (issue 27): a node's configuration from systemd credentials, a
labelled config partition or the kernel command line, checked whole (`model`, pure), rendered
to files (`render`, pure) and applied at the edge (`apply`), idempotently. docs/provisioning.md."""
