"""The A/B updater switched on in the image (docs/image.md "Updates"): RAUC's system
configuration, the ESP's mount point and the health gate before boot-complete.target.

Only a machine booted from the raw disk has slots (`rauc.slot=` on its kernel command line, from
its loader entry): the lab's direct-kernel VMs carry the same files and never use them (the ESP
is mounted on first use, the gate runs only on a boot systemd-boot counts).
"""

from __future__ import annotations

import os
from pathlib import Path

from nodeos.update import checks, layout

GATE_UNIT = "nodeos-health-gate.service"


def gate_unit_file(project_dir: Path) -> Path:
    return project_dir / "systemd" / GATE_UNIT


def _write(path: Path, text: str) -> None:
    """Replace, never write through: the staging tree is hard-linked to the base layer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text(text)


def install(rootfs: Path, project_dir: Path, arch: str) -> None:
    """system.conf for `arch`, the ESP's fstab line and /efi, the gate unit wired as
    boot-complete.target's requirement (systemd-bless-boot keeps a slot only after it)."""
    _write(rootfs / "etc" / "rauc" / "system.conf", layout.rauc_system_conf(checks.compatible_for(arch)))
    fstab = rootfs / "etc" / "fstab"
    lines = [ln for ln in fstab.read_text().splitlines(keepends=True) if f" {layout.ESP_MOUNT} " not in ln]
    _write(fstab, "".join(lines) + layout.esp_fstab_line())
    (rootfs / layout.ESP_MOUNT.lstrip("/")).mkdir(mode=0o700, exist_ok=True)
    sysd = rootfs / "etc" / "systemd" / "system"
    _write(sysd / GATE_UNIT, gate_unit_file(project_dir).read_text())
    link = sysd / "boot-complete.target.requires" / GATE_UNIT
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(f"/etc/systemd/system/{GATE_UNIT}", link)
