#!/usr/bin/env bash
# Builds (or refreshes) the appliance image: lab kernel/initramfs/rootfs and, with --raw, the
# GPT/UEFI disk image for bare metal. Cached under /var/cache/nodeos (NODEOS_CACHE) by a key of
# the inputs; a change to nodeos/ only refreshes the nodeos layer (seconds).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/images/bootstrap.sh"
exec "$top/.venv/bin/nodeos-lab" image "$@"
