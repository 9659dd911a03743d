"""The raw UEFI disk image for bare metal: GPT, an ESP with systemd-boot, the root file system.

Built without loop devices or mounts (sgdisk, mkfs.vfat + mtools, dd), from the image layer.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos.lab.image import (
    ESP_SIZE_MIB,
    ROOT_LABEL,
    ROOT_PARTUUID,
    Image,
    Progress,
    base_key,
    cache_root,
    default_progress,
    need_root,
    run_step,
)


def boot_options() -> str:
    return f"root=PARTUUID={ROOT_PARTUUID} rw console=tty0 console=ttyS0,115200 net.ifnames=0"


def build_raw(img: Image, progress: Progress = default_progress) -> Path:
    """GPT disk: ESP (systemd-boot, kernel, initramfs) + the root file system; UEFI boot."""
    need_root()
    for tool in ("sgdisk", "mkfs.vfat", "mcopy", "mmd"):
        if shutil.which(tool) is None:
            raise EnvironmentProblem(f"{tool} is not installed (run images/bootstrap.sh)")
    t0 = time.monotonic()
    progress("assembling the raw UEFI disk image (GPT, systemd-boot)")
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
    loader = tmp / "loader.conf"
    loader.write_text("default nodeos.conf\ntimeout 0\n")
    entry = tmp / "nodeos.conf"
    entry.write_text(
        f"title nodeos\nlinux /nodeos/vmlinuz\ninitrd /nodeos/initrd.img\noptions {boot_options()}\n"
    )
    m = ["-i", str(esp)]
    dirs = ["::/EFI", "::/EFI/BOOT", "::/EFI/systemd", "::/loader", "::/loader/entries", "::/nodeos"]
    run_step(["mmd", *m, *dirs], progress, quiet=True)
    for src, dst in (
        (efi, "::/EFI/BOOT/BOOTX64.EFI"),
        (efi, "::/EFI/systemd/systemd-bootx64.efi"),
        (loader, "::/loader/loader.conf"),
        (entry, "::/loader/entries/nodeos.conf"),
        (img.kernel, "::/nodeos/vmlinuz"),
        (img.initrd, "::/nodeos/initrd.img"),
    ):
        run_step(["mcopy", *m, str(src), dst], progress, quiet=True)
    sector = 512
    esp_start = 2048
    esp_sectors = ESP_SIZE_MIB * 1024 * 1024 // sector
    root_start = esp_start + esp_sectors
    root_sectors = img.rootfs.stat().st_size // sector
    total = (root_start + root_sectors + 2048) * sector
    disk = tmp / "disk.raw"
    with open(disk, "wb") as f:
        f.truncate(total)
    # Never -q with bookworm's sgdisk: it then silently writes nothing.
    run_step(
        [
            "sgdisk", "-o",
            "-n", f"1:{esp_start}:{root_start - 1}", "-t", "1:ef00", "-c", "1:ESP",
            "-n", f"2:{root_start}:{root_start + root_sectors - 1}", "-t", "2:8304", "-c", f"2:{ROOT_LABEL}",
            "-u", f"2:{ROOT_PARTUUID}", "-U", str(uuid.uuid5(uuid.NAMESPACE_URL, img.key)),
            str(disk),
        ],
        progress,
        quiet=True,
    )  # fmt: skip
    for src, start in ((esp, esp_start), (img.rootfs, root_start)):
        run_step(["dd", f"if={src}", f"of={disk}", "bs=1M", f"seek={start * sector}", "oflag=seek_bytes",
              "conv=notrunc,sparse", "status=none"], progress)  # fmt: skip
    disk.rename(img.raw)
    shutil.rmtree(tmp)
    progress(f"raw disk image ready in {time.monotonic() - t0:.0f} s: {img.raw}")
    return img.raw
