"""`nodeos-lab up --boot disk` and `--provision` without booting: the QEMU argv of a disk-booted
storage VM, the lab's words systemd-boot appends, the lab's identity as a provisioning file that
provisioning itself accepts, bad input; and the updater's files in an image tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nodeos.errors import BadInput
from nodeos.provision import model
from nodeos.update import layout
from nodeos_devtools.lab import diskboot, image_update, qemu
from nodeos_devtools.lab.plan import plan_vms


def _argv(tmp_path: Path, disk: bool, provision: bool = False) -> list[str]:
    (s1,) = plan_vms("x", 3, storage=1, drives=1, hosts=0, drive_dir=tmp_path)
    d = tmp_path / "s1"
    d.mkdir(exist_ok=True)
    if provision:
        diskboot.write_provision(s1, d, None)
    return qemu.command_line(
        "qemu", s1, accel="tcg", kernel=tmp_path / "k", initrd=tmp_path / "i", rootfs=tmp_path / "r",
        vm_dir=d, tap="tap-s1", tag="t", disk_boot=disk,
    )  # fmt: skip


def test_a_disk_booted_vm_boots_its_own_disk_under_ovmf(tmp_path: Path) -> None:
    argv = _argv(tmp_path, disk=True, provision=True)
    joined = " ".join(argv)
    assert "-kernel" not in argv and "-append" not in argv and str(tmp_path / "r") not in joined
    assert f"file={diskboot.OVMF_CODE}" in joined and f"file={tmp_path / 's1' / diskboot.VARS}" in joined
    assert f"file={tmp_path / 's1' / diskboot.DISK},if=none,id=root,format=qcow2" in joined
    assert "virtio-blk-pci,drive=root,bootindex=0" in argv
    assert qemu.STATE_DISK not in joined, "the state partition is on its disk"
    assert (
        f"name=opt/io.systemd.credentials/nodeos.provision,file={tmp_path / 's1' / 'provision.toml'}" in argv
    )
    (smbios,) = [argv[i + 1] for i, a in enumerate(argv) if a == "-smbios"]
    assert smbios.startswith("type=11,value=io.systemd.boot.kernel-cmdline-extra=")
    assert "modprobe.blacklist=ahci,,i2c_i801" in smbios, "QEMU's option syntax: commas doubled"


def test_a_kernel_booted_vm_is_unchanged_without_provision(tmp_path: Path) -> None:
    argv = _argv(tmp_path, disk=False)
    assert "-kernel" in argv and "-fw_cfg" not in argv and "-smbios" not in argv
    assert any(qemu.STATE_DISK in a for a in argv)
    assert "-fw_cfg" in _argv(tmp_path, disk=False, provision=True)


def test_the_lab_words_leave_root_state_identity_and_dbus_to_the_disk_and_credential(tmp_path: Path) -> None:
    (s1,) = plan_vms("x", 3, storage=1, drives=1, hosts=0, drive_dir=tmp_path)
    words = diskboot.cmdline_extra(s1, "tcg").split()
    assert "nodeos.lab=1" in words and f"nodeos.ip={s1.ip}" in words and "systemd.hostname=s1" in words
    for gone in ("root=", "console=", "systemd.mount-extra=", "nodeos.hostname=", "nodeos.address="):
        assert not [w for w in words if w.startswith(gone)], gone
    assert "rw" not in words
    assert "systemd.mask=dbus.service" not in words, "rauc install talks D-Bus"
    assert "systemd.mask=systemd-logind.service" in words


def test_the_lab_identity_is_a_valid_provisioning_file(tmp_path: Path) -> None:
    (s1,) = plan_vms("x", 3, storage=1, drives=1, hosts=0, drive_dir=tmp_path)
    plan = model.parse(tomllib.loads(diskboot.lab_provision(s1)))
    assert plan.hostname == "s1" and plan.storage_addresses == (s1.addr,)
    assert [(i.name, i.addresses) for i in plan.interfaces] == [("eth0", (s1.ip,))]


def test_bad_boot_and_provision_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as e:
        diskboot.check_boot("pxe")
    assert e.value.field == "boot" and "kernel, disk" in str(e.value.allowed)
    f = tmp_path / "s1.toml"
    f.write_text("version = 1\n")
    assert diskboot.parse_provision([f"s1={f}"], ["s1", "s2"]) == {"s1": f}
    for spec in (f"h1={f}", f"s1{f}", f"s1={tmp_path / 'missing'}", f"s3={f}"):
        with pytest.raises(BadInput) as e:
            diskboot.parse_provision([spec], ["s1", "s2"])
        assert e.value.field == "provision"
    with pytest.raises(BadInput):
        diskboot.parse_provision([f"s1={f}", f"s1={f}"], ["s1", "s2"])


def test_the_updater_is_switched_on_in_an_image_tree(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    base_fstab = root / "etc" / "fstab"
    base_fstab.write_text("LABEL=nodeos-root / ext4 defaults 0 1\n")
    base_copy = tmp_path / "base-fstab"
    base_copy.hardlink_to(base_fstab)  # the staging tree is hard-linked to the base layer
    image_update.install(root, Path(__file__).resolve().parents[3], "amd64")
    conf = (root / "etc/rauc/system.conf").read_text()
    assert "compatible=nodeos-amd64" in conf and "bootloader=custom" in conf
    fstab = (root / "etc/fstab").read_text()
    assert fstab.startswith("LABEL=nodeos-root") and f"PARTUUID={layout.ESP_PARTUUID} /efi vfat" in fstab
    assert "x-systemd.automount" in fstab and "nofail" in fstab
    assert base_copy.read_text() == "LABEL=nodeos-root / ext4 defaults 0 1\n", "the base was written through"
    assert (root / "efi").is_dir()
    link = root / "etc/systemd/system/boot-complete.target.requires/nodeos-health-gate.service"
    assert link.is_symlink() and (root / "etc/systemd/system/nodeos-health-gate.service").is_file()
    image_update.install(root, Path(__file__).resolve().parents[3], "amd64")  # again: one ESP line
    assert (root / "etc/fstab").read_text().count("/efi") == 1


def test_a_credential_set_for_a_vm_is_handed_over_at_its_next_start_owner_only(tmp_path: Path) -> None:
    """`Lab.set_credential`: what a BMC does between power cycles (the join token after `init`)."""
    diskboot.write_credential(tmp_path, "nodeos.join-token", b"tok")
    diskboot.write_credential(tmp_path, "nodeos.provision", b"version = 1\n")
    token = tmp_path / diskboot.CREDENTIALS / "nodeos.join-token"
    assert token.read_bytes() == b"tok" and token.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / diskboot.PROVISION).read_bytes() == b"version = 1\n"  # the configuration's own file
    args = diskboot.credential_args(tmp_path)
    assert f"name=opt/io.systemd.credentials/nodeos.join-token,file={token}" in args
    assert f"name=opt/io.systemd.credentials/nodeos.provision,file={tmp_path / diskboot.PROVISION}" in args
    with pytest.raises(BadInput) as e:
        diskboot.write_credential(tmp_path, "../etc/passwd", b"x")
    assert e.value.field == "name"
    assert not (tmp_path.parent / "etc").exists()


def test_the_image_carries_no_ssh_host_key_and_sshd_takes_keys_only(tmp_path: Path) -> None:
    """Every node booted from one image would otherwise present the same host keys."""
    from nodeos_devtools.lab import image, image_ssh

    ssh = tmp_path / "etc" / "ssh"
    ssh.mkdir(parents=True)
    for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "ssh_host_rsa_key", "sshd_config"):
        (ssh / name).write_text("x")
    image_ssh.install_sshd(tmp_path)
    assert sorted(p.name for p in ssh.iterdir()) == ["sshd_config", "sshd_config.d"]
    conf = (tmp_path / image_ssh.SSHD_DROPIN).read_text()
    assert f"HostKey {image_ssh.HOSTKEY_DIR}/ssh_host_ed25519_key" in conf
    assert "PasswordAuthentication no" in conf and "PermitRootLogin prohibit-password" in conf
    keygen = tmp_path / "etc" / "systemd" / "system" / image_ssh.DEBIAN_KEYGEN  # it would make /etc/ssh's
    assert keygen.is_symlink() and str(keygen.readlink()) == "/dev/null"
    unit = next(p for p in image.extra_unit_files() if p.name == image_ssh.HOSTKEY_UNIT).read_text()
    assert f"-f {image_ssh.HOSTKEY_DIR}/ssh_host_ed25519_key" in unit and "Before=ssh.service" in unit
    assert "openssh-server" in image.PACKAGES
