"""Slots as systemd-boot entries with boot counting, and RAUC's custom backend applying them to
a real directory standing for the ESP (nodeos/update/bootentries.py, nodeos/update/backend.py).
The whole cycle: the factory slot A, an update of B tried once, B's gate failing (the boot
loader returns to A by itself), and B's gate passing (B is kept)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeos.update import backend, layout
from nodeos.update import bootentries as be
from nodeos_devtools.lab import image, rawdisk


def _esp(tmp_path: Path) -> Path:
    esp = tmp_path / "esp"
    (esp / "loader" / "entries").mkdir(parents=True)
    (esp / "loader" / "entries" / "nodeos-a.conf").write_text(layout.loader_entry("a"))
    return esp


def _names(esp: Path) -> list[str]:
    return sorted(p.name for p in (esp / "loader" / "entries").iterdir())


def _slot_root(tmp_path: Path, tag: str) -> Path:
    root = tmp_path / f"slot-{tag}"
    (root / "boot").mkdir(parents=True)
    (root / "boot" / "vmlinuz-6.12.0-1-amd64").write_bytes(b"kernel " + tag.encode())
    (root / "boot" / "initrd.img-6.12.0-1-amd64").write_bytes(b"initrd " + tag.encode())
    return root


def _boot_attempt(esp: Path) -> str:
    """What systemd-boot does at power-on: take the first entry of its order; if it counts
    tries, count this one (rename +LEFT-DONE to +LEFT-1-DONE+1). Returns the slot booted."""
    e = be.primary(backend.read(esp))
    assert e is not None, "nothing bootable"
    if e.left is not None:
        d = esp / "loader" / "entries"
        os.replace(d / e.filename, d / be.filename(e.slot, e.left - 1, (e.done or 0) + 1))
    return e.slot


def test_names_and_states() -> None:
    content = layout.loader_entry("b", 7)
    assert be.parse("nodeos-b.conf", content) == be.Entry("nodeos-b.conf", "b", None, None, 7)
    assert be.parse("nodeos-b+1.conf", content).state == "trying"  # type: ignore[union-attr]
    assert be.parse("nodeos-b+0-1.conf", content).state == "bad"  # type: ignore[union-attr]
    assert be.parse("nodeos-b+2-1.conf", content).done == 1  # type: ignore[union-attr]
    assert be.parse("debian.conf", content) is None and be.parse("nodeos-z.conf", content) is None
    assert be.filename("b", 1) == "nodeos-b+1.conf" and be.filename("b", 0, 1) == "nodeos-b+0-1.conf"


def test_a_bad_entry_sorts_last_whatever_its_version() -> None:
    a = be.Entry("nodeos-a.conf", "a", None, None, 1)
    b_bad = be.Entry("nodeos-b+0-1.conf", "b", 0, 1, 2)
    b_trying = be.Entry("nodeos-b+1.conf", "b", 1, 0, 2)
    assert be.primary([a, b_bad]) == a
    assert be.primary([a, b_trying]) == b_trying
    assert be.primary([b_bad]) is None


def test_an_update_whose_gate_fails_returns_to_the_old_slot_by_itself(tmp_path: Path) -> None:
    esp = _esp(tmp_path)
    backend.copy_slot_kernel("b", esp, _slot_root(tmp_path, "new"))
    written = backend.set_primary(esp, "b", booted="a", mounted_copy=False)
    assert written == "nodeos-b+1.conf"
    assert (esp / "nodeos" / "b" / "vmlinuz").read_bytes() == b"kernel new"
    entries = backend.read(esp)
    assert be.slot_state(entries, "b", booted="a") == "trying"
    assert be.primary(entries).slot == "b"  # type: ignore[union-attr]
    # first boot: B, its one try counted; RAUC, asked from B, calls B good (its gate runs)
    assert _boot_attempt(esp) == "b"
    assert _names(esp) == ["nodeos-a.conf", "nodeos-b+0-1.conf"]
    assert be.slot_state(backend.read(esp), "b", booted="b") == "trying"
    # the gate fails: no blessing, a reboot; the boot loader alone picks A again, and again
    assert _boot_attempt(esp) == "a"
    assert _boot_attempt(esp) == "a"
    assert be.slot_state(backend.read(esp), "b", booted="a") == "bad"
    assert be.slot_state(backend.read(esp), "a", booted="a") == "good"


def test_an_update_whose_gate_passes_is_kept(tmp_path: Path) -> None:
    esp = _esp(tmp_path)
    backend.set_primary(esp, "b", booted="a", mounted_copy=False)
    assert _boot_attempt(esp) == "b"
    backend.set_state(esp, "b", good=True)  # what systemd-bless-boot's rename does, as RAUC's mark-good
    assert _names(esp) == ["nodeos-a.conf", "nodeos-b.conf"]
    assert _boot_attempt(esp) == "b" and _boot_attempt(esp) == "b"
    # the next update writes A: above B's generation, counted again
    assert backend.set_primary(esp, "a", booted="b", mounted_copy=False) == "nodeos-a+1.conf"
    assert _names(esp) == ["nodeos-a+1.conf", "nodeos-b.conf"]
    assert _boot_attempt(esp) == "a"


def test_marking_bad_and_the_backend_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    esp = _esp(tmp_path)
    monkeypatch.setenv("NODEOS_ESP", str(esp))
    backend.set_primary(esp, "b", booted="a", mounted_copy=False)
    assert backend.main(["set-state", "B", "bad"]) == 0
    assert _names(esp) == ["nodeos-a.conf", "nodeos-b+0-1.conf"]
    assert backend.main(["set-state", "B", "maybe"]) == 2
    assert backend.main(["set-primary", "C"]) == 2
    assert backend.main(["frobnicate"]) == 2


def test_get_commands_print_what_rauc_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODEOS_ESP", str(_esp(tmp_path)))
    assert backend.main(["get-primary"]) == 0
    assert backend.main(["get-state", "A"]) == 0
    assert backend.main(["get-state", "B"]) == 0  # no entry: cannot boot
    assert capsys.readouterr().out.split() == ["A", "good", "bad"]


def test_layout_names_agree() -> None:
    assert layout.SLOT_PARTUUIDS["a"] == image.ROOT_PARTUUID
    assert rawdisk.loader_entry is layout.loader_entry
    assert backend.booted_slot("root=PARTUUID=x rauc.slot=B quiet") == "b"
    assert backend.booted_slot("root=/dev/vda") is None
    conf = layout.rauc_system_conf("nodeos-amd64")
    assert "bootloader=custom\n" in conf and f"bootloader-custom-backend={layout.BACKEND}\n" in conf
    assert "bundle-formats=plain\n" in conf and "statusfile=/var/lib/nodeos/rauc.status\n" in conf
    for i, s in enumerate(layout.SLOTS):
        assert f"[slot.rootfs.{i}]\ndevice=/dev/disk/by-partuuid/{layout.SLOT_PARTUUIDS[s]}\n" in conf
        assert f"bootname={s.upper()}\n" in conf
