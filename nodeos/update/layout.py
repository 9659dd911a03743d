"""The A/B disk layout as the running system and the updater name it (docs/image.md, "Disk
layout"): fixed partition GUIDs, each slot's systemd-boot entry and kernel command line, and
RAUC's system configuration over them. Pure: the raw image build
(tests/tooling/nodeos_devtools/lab/rawdisk.py) and
the boot-loader backend (nodeos/update/backend.py) both use these.
"""

from __future__ import annotations

# Fixed partition GUIDs ("nodeos" + a tag), so boot entries and RAUC can name them on every disk.
SLOT_PARTUUIDS = {
    "a": "6e6f6465-6f73-4000-8000-726f6f746673",  # the image's ROOT_PARTUUID (the UEFI test checks it)
    "b": "6e6f6465-6f73-4000-8000-726f6f746662",
}
STATE_PARTUUID = "6e6f6465-6f73-4000-8000-737461746530"
ESP_PARTUUID = "6e6f6465-6f73-4000-8000-657370303031"
STATE_LABEL = "nodeos-state"
STATE_MOUNT = "/var/lib/nodeos"
SLOTS = ("a", "b")
ESP_MOUNT = "/efi"  # the ESP, mounted on first use (esp_fstab_line), where the backend writes
ENTRY_PREFIX = "nodeos-"
BOOT_TRIES = 1  # a written slot is booted once; a failed gate returns to the old slot
KEYRING = "/etc/rauc/keyring.pem"
BACKEND = "/usr/bin/nodeos-boot-backend"


def bootname(slot: str) -> str:
    """RAUC's name of a slot (`rauc.slot=A` on the command line): the slot letter, upper case."""
    return slot.upper()


def slot_of(name: str) -> str:
    s = name.lower()
    if s not in SLOTS:
        raise ValueError(f"no slot {name!r}; slots are {', '.join(bootname(x) for x in SLOTS)}")
    return s


def boot_options(slot: str = "a") -> str:
    """The kernel command line of `slot`'s loader entry: its root, the state partition, consoles."""
    state = f"systemd.mount-extra=/dev/disk/by-partuuid/{STATE_PARTUUID}:{STATE_MOUNT}:ext4:defaults"
    return (
        f"root=PARTUUID={SLOT_PARTUUIDS[slot]} rw rauc.slot={bootname(slot)} {state} "
        "panic=10 console=tty0 console=ttyS0,115200 net.ifnames=0"
    )


def loader_entry(slot: str, generation: int = 1) -> str:
    """A slot's systemd-boot entry (`loader/entries/nodeos-SLOT[+TRIES].conf`). Entries of one
    sort-key are ordered by version, highest first: an update gives the slot it wrote a higher
    generation and a boot counter in the file name, so it is tried first; systemd-boot sorts an
    entry whose tries ran out behind the others, so the old slot boots again by itself."""
    return (
        f"title nodeos (slot {bootname(slot)})\nsort-key nodeos\nversion {generation}\n"
        f"linux /nodeos/{slot}/vmlinuz\ninitrd /nodeos/{slot}/initrd.img\noptions {boot_options(slot)}\n"
    )


def esp_fstab_line() -> str:
    """/etc/fstab's line for the ESP: mounted on first use (automount), so a machine without it
    (the lab's direct-kernel VMs) never waits for it; root-only (umask)."""
    opts = "umask=0077,nofail,x-systemd.automount,x-systemd.idle-timeout=60,x-systemd.device-timeout=10s"
    return f"PARTUUID={ESP_PARTUUID} {ESP_MOUNT} vfat {opts} 0 0\n"


def rauc_system_conf(compatible: str) -> str:
    """RAUC's /etc/rauc/system.conf for the two root slots. The status file is on the state
    partition: which bundle is in which slot survives booting either slot."""
    slots = "".join(
        f"\n[slot.rootfs.{i}]\ndevice=/dev/disk/by-partuuid/{SLOT_PARTUUIDS[s]}\ntype=ext4\nbootname={bootname(s)}\n"
        for i, s in enumerate(SLOTS)
    )
    return (
        "[system]\n"
        f"compatible={compatible}\n"
        "bootloader=custom\n"
        "bundle-formats=plain\n"
        f"statusfile={STATE_MOUNT}/rauc.status\n\n"
        f"[handlers]\nbootloader-custom-backend={BACKEND}\n\n"
        f"[keyring]\npath={KEYRING}\n" + slots
    )
