#!/bin/sh
# Lab VMs only (kernel command line nodeos.lab=1): identity, address, kernel modules and the
# Soft-RoCE device, all given by nodeos-lab on the kernel command line.
set -eu
arg() {
  for w in $(cat /proc/cmdline); do
    case "$w" in "$1="*) echo "${w#*=}"; return 0 ;; esac
  done
  return 0
}
role=$(arg nodeos.role)
ip=$(arg nodeos.ip)
hostid=$(arg nodeos.hostid)
hostnqn=$(arg nodeos.hostnqn)
peer=$(arg nodeos.peer)
name=$(arg systemd.hostname)
mkdir -p /etc/nvme
[ -n "$hostid" ] && echo "$hostid" > /etc/nvme/hostid
[ -n "$hostnqn" ] && echo "$hostnqn" > /etc/nvme/hostnqn
ip link set lo up
# eth0 may still be on its way (slow udev under an emulated CPU): wait for it, loudly.
n=0
until [ -e /sys/class/net/eth0 ]; do
  n=$((n + 1))
  [ $n -le 1800 ] || { echo "nodeos-lab-init: no eth0 after 900 s" >&2; exit 1; }
  [ $((n % 60)) -ne 0 ] || echo "nodeos-lab-init: waiting for eth0"
  sleep 0.5
done
ip link set eth0 up
[ -n "$ip" ] && ip addr replace "$ip" dev eth0
# rdma_rxe needs crc32 before it can make a device (measured: -2 without it).
modprobe crc32_generic || true
case "$role" in
  storage) modprobe -a nvmet nvmet-tcp nvmet-rdma nvme-tcp nvme-rdma rdma_rxe ;;
  *) modprobe -a nvme-tcp nvme-rdma rdma_rxe ;;
esac
if [ "$role" = storage ] && [ -n "$peer" ]; then
  # nodeosd: node name = VM name, peers and exports on the lab address (any lab can cluster).
  mkdir -p /etc/nodeos
  cat > /etc/nodeos/nodeosd.toml <<CONF
# written by nodeos-lab-init from the kernel command line
node_name = "$name"
peer_listen = "$peer"
storage_address = ["${ip%/*}"]
# The lab has one network, so no management address: /metrics on loopback inside the VM
# (nodeosd refuses to serve it on a storage address).
metrics_listen = "127.0.0.1:9810"
# For the same reason the discovery controller's mDNS records (TP8009, for nvme-stas on the
# hosts) go out on eth0 although it carries the peer address (docs/network.md, "mDNS").
mdns_management = true
# Under TCG a VM can stall for seconds: a longer primary lease than hardware's 3 s default,
# so a busy but live node is not fenced (lab timings are context, not hardware figures).
lease_s = 8.0
# For the same reason a slower Raft tick: elections after 3-6 s of silence rather than 1-2 s (a
# starved VM's loop stalls that long and its followers campaigned: leadership churned, and each
# new leader counted leases afresh), and a third of the heartbeats on the starved cores.
raft_tick_ms = 300
CONF
  # The VM's identity (node name, peers, storage address, eth0's address) is then applied from
  # the words nodeos-lab put on the kernel command line by the appliance's own first-boot
  # provisioning (nodeos-provision.service, ordered after this unit; docs/provisioning.md),
  # merged over this file. The file holds the same values, so a provisioning that fails (said
  # on the console) leaves the lab as it was.
fi
if [ "$role" = storage ] && [ -e /usr/bin/nvmf_tgt ] && [ ! -e /etc/nodeos/spdk.env ]; then
  # An image built with SPDK (docs/image.md): a lab VM has 1 GiB, not the 4 GiB of hugepages a
  # server gives the target; 512, as 256 is too few for SPDK's default bdev_io pool (measured:
  # "could not allocate spdk_bdev_io pool"). (No --interrupt-mode: SPDK's PCIe NVMe driver needs VFIO MSI-X for
  # it, and the lab has no vIOMMU, so its drives go to uio_pci_generic; the reactor polls.)
  mkdir -p /etc/nodeos
  printf '%s\n' "# written by nodeos-lab-init" SPDK_HUGEMEM_MIB=512 SPDK_MAX_SUBSYSTEMS=1024 \
    > /etc/nodeos/spdk.env
  modprobe uio_pci_generic || true  # no vIOMMU in the lab: `drive claim` binds to uio_pci_generic
fi
if [ "$role" = host ] && [ -d /etc/stas ]; then
  # The GPU node's nvme-stas set-up as nodeos ships it (nodeos/hostsetup/): in place, not
  # started; a test that wants the host to find the cluster by itself starts avahi, stafd, stacd.
  for f in stafd.conf stacd.conf; do
    cp /usr/lib/python3/dist-packages/nodeos/hostsetup/$f /etc/stas/$f
  done
fi
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev eth0
echo "nodeos-lab-init: role=$role ip=$ip hostnqn=$hostnqn rxe0 up"
