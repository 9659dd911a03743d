"""What the appliance's Debian base layer holds (tests/tooling/nodeos_devtools/lab/image.py builds
it): packages, units masked or left disabled, tlshd's configuration, and the recipe number that
says when their meaning changed."""

from __future__ import annotations

# Everything the appliance and the lab need, from Debian (nodeos's Python deps too, never pip).
PACKAGES: tuple[str, ...] = (
    "linux-image-amd64",
    "initramfs-tools",
    "systemd",
    "systemd-sysv",
    "systemd-boot-efi",
    "udev",
    "dbus",
    "kmod",
    "iproute2",
    "iputils-ping",
    "procps",
    "ethtool",
    "nvme-cli",
    "rdma-core",
    "ibverbs-providers",
    "python3-pyverbs",
    "lvm2",
    "thin-provisioning-tools",
    "mdadm",
    "fio",
    "qemu-guest-agent",
    "python3",
    "python3-lmdb",
    "python3-cryptography",
    "python3-msgpack",
    "python3-msgspec",
    "python3-click",
    "python3-pyroute2",
    "python3-systemd",
    "python3-prometheus-client",
    "python3-zeroconf",  # mDNS advertisement of the discovery controller (nodeos/mdns/)
    # NVMe/TCP TLS on the kernel target and the kernel host: the handshake is tlshd's (a user
    # space daemon the kernel hands it to), with the PSKs in the kernel's .nvme keyring.
    "ktls-utils",
    "keyutils",
    # The GPU node's side (nodeos/hostsetup/, docs/network.md "The GPU host"): the lab's GPU-node
    # VMs boot this image too. Installed, never enabled: a storage node runs neither.
    *("nvme-stas", "avahi-daemon"),
    # A/B updates (docs/image.md): RAUC + its D-Bus service (`rauc install` talks to it), unsquashfs
    # (rauc reads a plain bundle with it), systemd-boot (bootctl, bless-boot: boot counting), fsck.vfat.
    *("rauc", "rauc-service", "squashfs-tools", "systemd-boot", "dosfstools"),
    *("openssh-server", "systemd-timesyncd"),  # provisioning's SSH keys and NTP servers (image_ssh.py)
)

# Timers and services an appliance does not want running behind its back (masked in the base).
MASKED_UNITS: tuple[str, ...] = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "apt-daily.service",
    "apt-daily-upgrade.service",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    # md: a check/resync started by a timer is load nobody asked for; arrays are nodeos's to run.
    "mdcheck_start.timer",
    "mdcheck_continue.timer",
    "mdmonitor-oneshot.timer",
)

TLSHD_CONF = """\
# nodeos: NVMe/TCP TLS (nodeos/dataplane/kernel/tlskeys.py, docs/operations.md)
[debug]
loglevel=0
tls=0
nl=0

[authenticate]
keyrings=.nvme

[authenticate.client]

[authenticate.server]
"""

# Bumped whenever the base customisation below changes meaning.
BASE_RECIPE = 10

# Installed for the GPU-node VMs, started there only when a test asks (their postinsts enable them).
DISABLED_UNITS: tuple[str, ...] = (
    "avahi-daemon.service",
    "avahi-daemon.socket",
    "stafd.service",
    "stacd.service",
)
