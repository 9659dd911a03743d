#!/usr/bin/env bash
# The README's main-job command: on a fresh Debian machine (as root) install what is missing,
# build the appliance image (cached), boot a storage VM and a GPU-node VM, export a
# drive-backed volume over NVMe/TCP and NVMe/RDMA (Soft-RoCE), verify data from the GPU node,
# and tear everything down. `bash images/demo.sh --keep` leaves the lab up to explore.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/images/bootstrap.sh"
exec "$top/.venv/bin/nodeos-lab" --name "${NODEOS_LAB_NAME:-demo}" demo "$@"
