"""Hardware inventory and health: NVMe drives (nvme-cli JSON, SMART) and RDMA ports."""
