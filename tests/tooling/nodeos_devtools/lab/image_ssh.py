"""sshd in the image: keys only, and host keys of each node's own (docs/image.md, "Identity").

Debian's openssh-server makes host keys when it is installed, that is once, in the base layer:
every node booted from the image would present the same keys. The image carries none; each node
makes its own at its first boot (systemd/nodeos-ssh-hostkeys.service) on the state partition,
so an update of its slot keeps them (the operator's known_hosts stays valid). Until a node is
provisioned with authorized keys (docs/provisioning.md) nobody can log in: root is locked and no
password is ever accepted.
"""

from __future__ import annotations

from pathlib import Path

HOSTKEY_UNIT = "nodeos-ssh-hostkeys.service"
# Debian's own first-boot key maker (ssh-keygen -A into /etc/ssh: the slot, so per slot): ours
# replaces it.
DEBIAN_KEYGEN = "sshd-keygen.service"
HOSTKEY_DIR = "/var/lib/nodeos/ssh"
SSHD_DROPIN = "etc/ssh/sshd_config.d/40-nodeos-hostkeys.conf"
SSHD_CONF = (
    "# nodeos: host keys of this node's own, on the state partition (nodeos-ssh-hostkeys.service)\n"
    f"HostKey {HOSTKEY_DIR}/ssh_host_ed25519_key\nHostKey {HOSTKEY_DIR}/ssh_host_ecdsa_key\n"
    "# keys only, whether or not provisioning gave any\n"
    "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
)


def install_sshd(rootfs: Path) -> None:
    """Drop the base's host keys and point sshd at the node's own (in the staging tree, which is
    hard-linked to the base layer: unlink and write anew, never write through)."""
    for key in (rootfs / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    dropin = rootfs / SSHD_DROPIN
    dropin.parent.mkdir(parents=True, exist_ok=True)
    if dropin.exists():
        dropin.unlink()
    dropin.write_text(SSHD_CONF)
    mask = rootfs / "etc" / "systemd" / "system" / DEBIAN_KEYGEN
    mask.parent.mkdir(parents=True, exist_ok=True)
    if mask.is_symlink() or mask.exists():
        mask.unlink()
    mask.symlink_to("/dev/null")
