#!/bin/sh
# First boot: give this machine its own NVMe host identity (never baked into the image).
set -eu
mkdir -p /etc/nvme
if [ ! -s /etc/nvme/hostid ]; then
  cat /proc/sys/kernel/random/uuid > /etc/nvme/hostid
fi
if [ ! -s /etc/nvme/hostnqn ]; then
  echo "nqn.2014-08.org.nvmexpress:uuid:$(cat /etc/nvme/hostid)" > /etc/nvme/hostnqn
fi
