"""`nodeos-boot-backend`: RAUC's `custom` boot-loader backend over systemd-boot's entries.

RAUC calls it (system.conf `bootloader=custom`, nodeos/update/layout.py) as
`get-primary`, `set-primary BOOTNAME`, `get-state BOOTNAME`, `set-state BOOTNAME good|bad`,
`get-current`. The decisions are nodeos/update/bootentries.py's; this applies them to the ESP
(`NODEOS_ESP`, default /efi): every file is written beside its final name, flushed, then
renamed, so a power cut leaves either the old entry or the new one.

`set-primary` of the slot RAUC just wrote first copies that slot's own kernel and initramfs
(from its /boot, mounted read-only) to the ESP under the slot's directory, then writes its entry
with a boot counter: the entry appears only once everything it names is in place.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from nodeos.update import bootentries as be
from nodeos.update import layout


def esp_dir() -> Path:
    return Path(os.environ.get("NODEOS_ESP", layout.ESP_MOUNT))


def read(esp: Path) -> list[be.Entry]:
    d = esp / "loader" / "entries"
    out = []
    for p in sorted(d.glob("*.conf")) if d.is_dir() else []:
        e = be.parse(p.name, p.read_text(errors="replace"))
        if e is not None:
            out.append(e)
    return out


def booted_slot(cmdline: str | None = None) -> str | None:
    text = cmdline if cmdline is not None else Path("/proc/cmdline").read_text()
    for word in text.split():
        if word.startswith("rauc.slot="):
            return word.removeprefix("rauc.slot=").lower()
    return None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _newest(boot: Path, pattern: str) -> Path:
    found = sorted(boot.glob(pattern))
    if not found:
        raise SystemExit(f"nodeos-boot-backend: no {pattern} in the new slot's /boot")
    return found[-1]


def copy_slot_kernel(slot: str, esp: Path, slot_root: Path) -> None:
    """The slot's own kernel and initramfs (its /boot) to ESP/nodeos/SLOT/."""
    boot = slot_root / "boot"
    for pattern, name in (("vmlinuz-*", "vmlinuz"), ("initrd.img-*", "initrd.img")):
        _write_atomic(esp / "nodeos" / slot / name, _newest(boot, pattern).read_bytes())


def _mounted_copy(slot: str, esp: Path) -> None:
    dev = f"/dev/disk/by-partuuid/{layout.SLOT_PARTUUIDS[slot]}"
    with tempfile.TemporaryDirectory(prefix="nodeos-slot-") as mnt:
        subprocess.run(["mount", "-o", "ro,nodev,nosuid,noexec", dev, mnt], check=True)
        try:
            copy_slot_kernel(slot, esp, Path(mnt))
        finally:
            subprocess.run(["umount", mnt], check=False)


def set_primary(esp: Path, slot: str, booted: str | None, *, mounted_copy: bool = True) -> str:
    if slot != booted and mounted_copy:
        _mounted_copy(slot, esp)
    plan = be.activate(read(esp), slot, booted=booted)
    entries = esp / "loader" / "entries"
    _write_atomic(entries / plan.write, plan.content.encode())
    for old in plan.remove:
        (entries / old).unlink(missing_ok=True)
    return plan.write


def set_state(esp: Path, slot: str, good: bool) -> None:
    change = be.mark(read(esp), slot, good)
    if change is not None:
        entries = esp / "loader" / "entries"
        os.replace(entries / change[0], entries / change[1])


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    esp = esp_dir()
    try:
        cmd = args[0]
        if cmd == "get-primary":
            p = be.primary(read(esp))
            if p is None:
                print("nodeos-boot-backend: no bootable entry", file=sys.stderr)
                return 1
            print(layout.bootname(p.slot))
        elif cmd == "get-current":
            slot = booted_slot()
            if slot is None:
                return 1
            print(layout.bootname(slot))
        elif cmd == "get-state":
            state = be.slot_state(read(esp), layout.slot_of(args[1]), booted_slot())
            print("bad" if state == "bad" else "good")  # RAUC knows good and bad; trying is good
        elif cmd == "set-state":
            if args[2] not in ("good", "bad"):
                raise ValueError(args[2])
            set_state(esp, layout.slot_of(args[1]), args[2] == "good")
        elif cmd == "set-primary":
            set_primary(esp, layout.slot_of(args[1]), booted_slot())
        else:
            raise ValueError(cmd)
    except (IndexError, ValueError) as exc:
        print(f"nodeos-boot-backend: bad arguments {args}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
