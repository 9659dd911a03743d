"""The A/B slots as `nodeos node show` reports them, from RAUC's status (nodeos/update/slots.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodeos.update.slots import read_slots, slot_views


def _slot(bootname: str, state: str, boot_status: str, version: str | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"class": "rootfs", "bootname": bootname, "state": state, "boot_status": boot_status}
    if version:
        s["slot_status"] = {"bundle": {"compatible": "nodeos-amd64", "version": version}}
    return s


def _doc(primary: str, *slots: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"compatible": "nodeos-amd64", "boot_primary": primary, "slots": [{n: s} for n, s in slots]}


def test_factory_image_booted_from_a_with_b_empty() -> None:
    doc = _doc(
        "rootfs.0", ("rootfs.0", _slot("A", "booted", "good")), ("rootfs.1", _slot("B", "inactive", "bad"))
    )
    assert slot_views(doc, running="0.4.0", bless="good") == [
        {"name": "A", "version": "0.4.0", "state": "good", "booted": True},
        {"name": "B", "version": None, "state": "bad", "booted": False},
    ]


def test_written_slot_is_trying_until_its_gate() -> None:
    written = _doc(
        "rootfs.1",
        ("rootfs.0", _slot("A", "booted", "good")),
        ("rootfs.1", _slot("B", "inactive", "good", "0.5.0")),
    )
    views = slot_views(written, running="0.4.0", bless="good")
    assert [(v["name"], v["version"], v["state"]) for v in views] == [
        ("A", "0.4.0", "good"),
        ("B", "0.5.0", "trying"),
    ]
    booted_b = _doc(
        "rootfs.1",
        ("rootfs.0", _slot("A", "inactive", "good", "0.4.0")),
        ("rootfs.1", _slot("B", "booted", "good", "0.5.0")),
    )
    assert [v["state"] for v in slot_views(booted_b, running="0.5.0", bless="indeterminate")] == [
        "good",
        "trying",
    ]
    assert [v["state"] for v in slot_views(booted_b, running="0.5.0", bless="good")] == ["good", "good"]


def test_a_slot_that_failed_its_gate_is_bad() -> None:
    doc = _doc(
        "rootfs.0",
        ("rootfs.0", _slot("A", "booted", "good", "0.4.0")),
        ("rootfs.1", _slot("B", "inactive", "bad", "0.5.0")),
    )
    assert [v["state"] for v in slot_views(doc, running="0.4.0", bless="good")] == ["good", "bad"]


def test_no_slots_is_said_not_invented(tmp_path: Path) -> None:
    out = read_slots(tmp_path / "system.conf")
    assert out["slots"] is None
    assert "no A/B slots" in out["slots_note"]


def test_the_images_files_without_its_disk_have_no_slots(tmp_path: Path) -> None:
    """The lab's kernel-booted VMs carry system.conf too; without rauc.slot= RAUC is not asked."""
    conf = tmp_path / "system.conf"
    conf.write_text("[system]\n")
    out = read_slots(conf, cmdline="root=/dev/vda rw console=ttyS0")
    assert out["slots"] is None and "no rauc.slot= on the kernel command line" in out["slots_note"]


def test_each_slot_boots_its_own_root_and_kernel_and_mounts_the_state_partition() -> None:
    from nodeos.update import layout as rawdisk
    from nodeos_devtools.lab import image

    a, b = rawdisk.loader_entry("a"), rawdisk.loader_entry("b", generation=2)
    assert f"root=PARTUUID={image.ROOT_PARTUUID} " in a  # what tests/lab/test_image_uefi.py checks
    assert f"root=PARTUUID={rawdisk.SLOT_PARTUUIDS['b']} " in b
    assert "linux /nodeos/a/vmlinuz\ninitrd /nodeos/a/initrd.img\n" in a
    assert "linux /nodeos/b/vmlinuz\ninitrd /nodeos/b/initrd.img\n" in b
    assert "rauc.slot=A " in a and "rauc.slot=B " in b
    assert "sort-key nodeos\nversion 1\n" in a and "version 2\n" in b
    for entry in (a, b):
        assert (
            f"systemd.mount-extra=/dev/disk/by-partuuid/{rawdisk.STATE_PARTUUID}:/var/lib/nodeos:ext4:"
            in entry
        )
    uuids = [*rawdisk.SLOT_PARTUUIDS.values(), rawdisk.STATE_PARTUUID]
    assert len(set(uuids)) == 3
