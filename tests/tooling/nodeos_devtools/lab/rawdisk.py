"""The raw UEFI disk image for bare metal: GPT with an ESP (systemd-boot), root slots A and B
of equal size, and one persistent state partition (docs/image.md "Disk layout").

| # | GPT name | type | size | content |
|---|---|---|---|---|
| 1 | ESP | ef00 | 256 MiB | systemd-boot; each slot's kernel and initramfs (`/nodeos/a/`), its loader entry |
| 2 | nodeos-root-a | 8304 | ROOT_SIZE_MIB | slot A: the image's root file system |
| 3 | nodeos-root-b | 8304 | ROOT_SIZE_MIB | slot B: empty until the first update writes it |
| 4 | nodeos-state | 8300 | STATE_SIZE_MIB | ext4 `nodeos-state` at /var/lib/nodeos; no update touches it |

The kernel and initramfs belong to a slot: they are in the slot's /boot, and their copies on the
ESP sit under the slot's own directory, named by the slot's own loader entry. The state partition
is mounted by the entry's `systemd.mount-extra=` (systemd's fstab generator), so the root file
system stays the one the lab boots directly, where no such partition exists.

Built without loop devices or mounts (sgdisk, mkfs.vfat + mtools, mke2fs, dd), from the image layer.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos.update.layout import ESP_PARTUUID, SLOT_PARTUUIDS, STATE_LABEL, STATE_PARTUUID, loader_entry
from nodeos_devtools.lab.image import (
    ESP_SIZE_MIB,
    ROOT_SIZE_MIB,
    Image,
    Progress,
    base_key,
    cache_root,
    default_progress,
    need_root,
    run_step,
)

STATE_SIZE_MIB = 1024  # the last partition: grown into the rest of a larger disk (not yet done)


def build_raw(img: Image, progress: Progress = default_progress) -> Path:
    """GPT disk: ESP (systemd-boot, slot A's kernel, initramfs and entry), root slots A (the
    image's root file system) and B (empty), the state partition (empty ext4); UEFI boot."""
    need_root()
    for tool in ("sgdisk", "mkfs.vfat", "mcopy", "mmd", "mke2fs"):
        if shutil.which(tool) is None:
            raise EnvironmentProblem(f"{tool} is not installed (run images/bootstrap.sh)")
    t0 = time.monotonic()
    progress("assembling the raw UEFI disk image (GPT: ESP, root slots A and B, state)")
    base = cache_root() / f"base-{base_key()}"
    efi = base / "rootfs" / "usr" / "lib" / "systemd" / "boot" / "efi" / "systemd-bootx64.efi"
    if not efi.exists():
        raise OperationFailed(f"{efi} missing: the base lacks systemd-boot-efi")
    tmp = img.dir / "raw.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    esp = tmp / "esp.img"
    run_step(
        ["mkfs.vfat", "-F", "32", "-n", "ESP", "-C", str(esp), str(ESP_SIZE_MIB * 1024)], progress, quiet=True
    )
    # No `default`: the first entry in systemd-boot's order boots (see loader_entry).
    loader = tmp / "loader.conf"
    loader.write_text("timeout 0\n")
    entry = tmp / "nodeos-a.conf"
    entry.write_text(loader_entry("a"))
    m = ["-i", str(esp)]
    dirs = ["::/EFI", "::/EFI/BOOT", "::/EFI/systemd", "::/loader", "::/loader/entries", "::/nodeos"]
    dirs += ["::/nodeos/a", "::/nodeos/b"]
    run_step(["mmd", *m, *dirs], progress, quiet=True)
    for src, dst in (
        (efi, "::/EFI/BOOT/BOOTX64.EFI"),
        (efi, "::/EFI/systemd/systemd-bootx64.efi"),
        (loader, "::/loader/loader.conf"),
        (entry, "::/loader/entries/nodeos-a.conf"),
        (img.kernel, "::/nodeos/a/vmlinuz"),
        (img.initrd, "::/nodeos/a/initrd.img"),
    ):
        run_step(["mcopy", *m, str(src), dst], progress, quiet=True)
    state = tmp / "state.ext4"
    run_step(
        ["mke2fs", "-q", "-F", "-t", "ext4", "-L", STATE_LABEL, str(state), f"{STATE_SIZE_MIB}M"], progress
    )
    sector = 512
    mib = 1024 * 1024 // sector
    slot_sectors = ROOT_SIZE_MIB * mib
    if img.rootfs.stat().st_size > slot_sectors * sector:
        raise OperationFailed(f"{img.rootfs} is larger than a root slot ({ROOT_SIZE_MIB} MiB)")
    starts = [2048]  # ESP, A, B, state: each starts where the one before ends (1 MiB aligned)
    for n_sectors in (ESP_SIZE_MIB * mib, slot_sectors, slot_sectors):
        starts.append(starts[-1] + n_sectors)
    esp_start, a_start, b_start, state_start = starts
    total = (state_start + STATE_SIZE_MIB * mib + 2048) * sector
    disk = tmp / "disk.raw"
    with open(disk, "wb") as f:
        f.truncate(total)
    # Never -q with bookworm's sgdisk: it then silently writes nothing.
    run_step(
        [
            "sgdisk", "-o",
            "-n", f"1:{esp_start}:{a_start - 1}", "-t", "1:ef00", "-c", "1:ESP", "-u", f"1:{ESP_PARTUUID}",
            "-n", f"2:{a_start}:{b_start - 1}", "-t", "2:8304", "-c", "2:nodeos-root-a",
            "-u", f"2:{SLOT_PARTUUIDS['a']}",
            "-n", f"3:{b_start}:{state_start - 1}", "-t", "3:8304", "-c", "3:nodeos-root-b",
            "-u", f"3:{SLOT_PARTUUIDS['b']}",
            "-n", f"4:{state_start}:{state_start + STATE_SIZE_MIB * mib - 1}", "-t", "4:8300",
            "-c", f"4:{STATE_LABEL}", "-u", f"4:{STATE_PARTUUID}",
            "-U", str(uuid.uuid5(uuid.NAMESPACE_URL, img.key)),
            str(disk),
        ],
        progress,
        quiet=True,
    )  # fmt: skip
    for src, start in ((esp, esp_start), (img.rootfs, a_start), (state, state_start)):
        run_step(["dd", f"if={src}", f"of={disk}", "bs=1M", f"seek={start * sector}", "oflag=seek_bytes",
              "conv=notrunc,sparse", "status=none"], progress)  # fmt: skip
    disk.rename(img.raw)
    shutil.rmtree(tmp)
    progress(f"raw disk image ready in {time.monotonic() - t0:.0f} s: {img.raw}")
    return img.raw
