"""Which NVMe drives may be handed to SPDK and back (nodeos/hw/pci.py): the facts read from a
sysfs/proc tree laid out as Linux lays it out (in a temporary directory), and the decisions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeos.errors import BadInput, NotFound
from nodeos.hw import pci
from nodeos.hw.pci import Function, Sysfs, check_address, claim_plan, release_plan


def _link(p: Path, target: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, p)


def _nvme_fn(
    root: Path, bdf: str, driver: str, ctrl: str | None, serial: str = "", iommu: str | None = "7"
) -> Path:
    dev = root / "sys/bus/pci/devices" / bdf
    dev.mkdir(parents=True)
    (dev / "class").write_text(pci.NVME_CLASS + "\n")
    if driver:
        _link(dev / "driver", f"../../../bus/pci/drivers/{driver}")
    if iommu is not None:
        _link(dev / "iommu_group", f"../../../kernel/iommu_groups/{iommu}")
    if ctrl:
        c = dev / "nvme" / ctrl
        c.mkdir(parents=True)
        (c / "serial").write_text(serial + "\n")
        (c / "model").write_text("Example NVMe 1TB\n")
        (c / "firmware_rev").write_text("1.0\n")
    return dev


def _block(root: Path, dev: Path, ctrl: str, ns: str, parts: tuple[str, ...] = (), majmin: str = "") -> None:
    d = dev / "nvme" / ctrl / ns
    d.mkdir(parents=True)
    for p in parts:
        (d / p).mkdir()
    for name in (ns, *parts):
        (root / "sys/class/block" / name / "holders").mkdir(parents=True, exist_ok=True)
    if majmin:
        _link(root / "sys/dev/block" / majmin, f"../../devices/x/{ns}")


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    """Boot drive nvme0 (root on nvme0n1p2, /boot/efi on p1), a data drive nvme1 with LVM on it
    (dm-0 mounted on /data), a free drive nvme2, a drive vfio-pci holds, a non-NVMe function."""
    r = tmp_path
    boot = _nvme_fn(r, "0000:01:00.0", "nvme", "nvme0", "BOOT1")
    _block(r, boot, "nvme0", "nvme0n1", ("nvme0n1p1", "nvme0n1p2"))
    _link(r / "sys/dev/block/259:1", "../../devices/x/nvme0n1/nvme0n1p1")
    _link(r / "sys/dev/block/259:2", "../../devices/x/nvme0n1/nvme0n1p2")
    lvm = _nvme_fn(r, "0000:02:00.0", "nvme", "nvme1", "LVM1")
    _block(r, lvm, "nvme1", "nvme1n1")
    (r / "sys/class/block/nvme1n1/holders/dm-0").mkdir()
    (r / "sys/class/block/dm-0/holders").mkdir(parents=True)
    _link(r / "sys/dev/block/254:0", "../../devices/virtual/block/dm-0")
    free = _nvme_fn(r, "0000:03:00.0", "nvme", "nvme2", "FREE1")
    _block(r, free, "nvme2", "nvme2n1")
    _nvme_fn(r, "0000:04:00.0", "vfio-pci", None)
    other = r / "sys/bus/pci/devices/0000:00:1f.2"
    other.mkdir(parents=True)
    (other / "class").write_text("0x010601\n")  # AHCI: not NVMe
    (r / "proc/self").mkdir(parents=True)
    (r / "proc/self/mountinfo").write_text(
        "22 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
        "23 22 259:1 / /boot/efi rw - vfat /dev/nvme0n1p1 rw\n"
        "24 22 254:0 / /data rw - xfs /dev/mapper/vg-data rw\n"
        "25 22 0:5 / /proc rw - proc proc rw\n"
    )
    (r / "proc/swaps").write_text("Filename Type Size Used Priority\n")
    (r / "sys/kernel/iommu_groups/7").mkdir(parents=True)
    return r


def test_sysfs_lists_every_nvme_function_with_its_owner_and_what_sits_on_it(machine: Path) -> None:
    fns = {f.address: f for f in Sysfs(machine, modprobe=False).functions()}
    assert sorted(fns) == ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"]
    assert [fns[a].owner for a in sorted(fns)] == ["kernel", "kernel", "kernel", "spdk"]
    assert fns["0000:01:00.0"].blocks == ("nvme0n1", "nvme0n1p1", "nvme0n1p2")
    assert fns["0000:01:00.0"].serial == "BOOT1" and fns["0000:01:00.0"].controllers == ("nvme0",)
    assert fns["0000:02:00.0"].holders == ("dm-0",)
    assert fns["0000:04:00.0"].driver == "vfio-pci" and fns["0000:04:00.0"].iommu_group == "7"
    s = Sysfs(machine, modprobe=False)
    assert s.mounts() == {"nvme0n1p2": ("/",), "nvme0n1p1": ("/boot/efi",), "dm-0": ("/data",)}
    assert s.swaps() == set() and s.iommu()


def _facts(root: Path) -> tuple[list[Function], dict[str, tuple[str, ...]], set[str], bool]:
    s = Sysfs(root, modprobe=False)
    return s.functions(), s.mounts(), s.swaps(), s.iommu()


def test_the_boot_drive_is_never_handed_to_spdk(machine: Path) -> None:
    with pytest.raises(BadInput) as e:
        claim_plan("0000:01:00.0", *_facts(machine))
    assert e.value.field == "address" and "boot drive" in e.value.message and "on /" in e.value.message


def test_a_drive_under_a_mounted_lvm_volume_is_refused_naming_the_mount(machine: Path) -> None:
    with pytest.raises(BadInput) as e:
        claim_plan("0000:02:00.0", *_facts(machine))
    assert e.value.field == "address" and "/dev/dm-0 on /data" in e.value.message
    fns, _, swaps, iommu = _facts(machine)
    with pytest.raises(BadInput, match="in use by dm-0"):  # unmounted, the LVM still holds it
        claim_plan("0000:02:00.0", fns, {}, swaps, iommu)


def test_swap_on_a_drive_is_refused() -> None:
    f = Function("0000:05:00.0", "nvme", "3", ("nvme3",), ("nvme3n1",))
    with pytest.raises(BadInput, match="swap"):
        claim_plan("0000:05:00.0", [f], {}, {"nvme3n1"}, True)


def test_a_free_drive_goes_to_vfio_pci_with_an_iommu_and_uio_without(machine: Path) -> None:
    fns, mounts, swaps, _ = _facts(machine)
    assert claim_plan("0000:03:00.0", fns, mounts, swaps, True).driver == "vfio-pci"
    plan = claim_plan("03:00.0", fns, mounts, swaps, False)  # short form: domain 0000
    assert plan.address == "0000:03:00.0" and plan.driver == "uio_pci_generic"
    assert "no IOMMU" in plan.notes[0]


def test_claim_of_an_spdk_drive_does_nothing_and_release_gives_it_back(machine: Path) -> None:
    fns, mounts, swaps, iommu = _facts(machine)
    assert claim_plan("pcie:0000:04:00.0", fns, mounts, swaps, iommu).driver is None
    assert release_plan("0000:04:00.0", fns, {}).driver == "nvme"
    assert release_plan("0000:03:00.0", fns, {}).driver is None  # the kernel's already


def test_a_pool_drive_is_not_released(machine: Path) -> None:
    fns = _facts(machine)[0]
    with pytest.raises(BadInput) as e:
        release_plan("0000:04:00.0", fns, {"0000:04:00.0": "fast"})
    assert e.value.field == "address" and "pool 'fast'" in e.value.message


def test_unknown_addresses_and_foreign_drivers_are_refused(machine: Path) -> None:
    fns, mounts, swaps, iommu = _facts(machine)
    with pytest.raises(NotFound) as e:
        claim_plan("0000:00:1f.2", fns, mounts, swaps, iommu)  # AHCI, not NVMe
    assert e.value.field == "address" and "0000:03:00.0" in e.value.allowed
    with pytest.raises(BadInput, match="bound to driver pci-stub"):
        claim_plan("0000:06:00.0", [Function("0000:06:00.0", "pci-stub")], {}, set(), True)
    for bad in ("nvme0", "0000:01:00", "1:00.0", 7):
        with pytest.raises(BadInput) as e:
            check_address(bad)
        assert e.value.field == "address"


def _fn(root: Path, bdf: str, cls: str, driver: str, group: str, net: str = "") -> None:
    dev = root / "sys/bus/pci/devices" / bdf
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "class").write_text(cls + "\n")
    if driver:
        _link(dev / "driver", f"../../../bus/pci/drivers/{driver}")
    _link(dev / "iommu_group", f"../../../kernel/iommu_groups/{group}")
    if net:
        (dev / "net" / net).mkdir(parents=True)
    _link(root / "sys/kernel/iommu_groups" / group / "devices" / bdf, f"../../../../devices/pci0000:00/{bdf}")


@pytest.fixture
def groups(tmp_path: Path) -> Path:
    """IOMMU groups as a board without ACS on every slot lays them out: group 1 the boot drive
    nvme0 and data drive nvme1 behind one bridge; group 2 drive nvme2 beside the onboard NIC
    (e1000e, eno1); group 3 drives nvme3 and nvme4 (both free) with their bridge and an unbound
    function; group 4 drive nvme5 alone."""
    r = tmp_path
    for bdf, ctrl, group in [
        ("0000:01:00.0", "nvme0", "1"),
        ("0000:02:00.0", "nvme1", "1"),
        ("0000:03:00.0", "nvme2", "2"),
        ("0000:05:00.0", "nvme3", "3"),
        ("0000:06:00.0", "nvme4", "3"),
        ("0000:07:00.0", "nvme5", "4"),
    ]:
        dev = _nvme_fn(r, bdf, "nvme", ctrl, serial=ctrl.upper(), iommu=group)
        _block(r, dev, ctrl, ctrl + "n1")
        _link(r / "sys/kernel/iommu_groups" / group / "devices" / bdf, f"../../../../devices/x/{bdf}")
    _fn(r, "0000:00:01.0", "0x060400", "pcieport", "1")
    _fn(r, "0000:00:1f.6", "0x020000", "e1000e", "2", net="eno1")
    _fn(r, "0000:00:1c.0", "0x060400", "pcieport", "3")
    _fn(r, "0000:00:1c.1", "0x088000", "", "3")
    _link(r / "sys/dev/block/259:0", "../../devices/x/nvme0n1")
    (r / "proc/self").mkdir(parents=True)
    (r / "proc/self/mountinfo").write_text("22 1 259:0 / / rw,relatime - ext4 /dev/nvme0n1 rw\n")
    (r / "proc/swaps").write_text("Filename Type Size Used Priority\n")
    return r


def _claim(root: Path, address: str) -> pci.Plan:
    s = Sysfs(root, modprobe=False)
    fns = s.functions()
    group = s.group(next(f.iommu_group for f in fns if f.address == address))
    return claim_plan(address, fns, s.mounts(), s.swaps(), s.iommu(), group)


def test_sysfs_reads_an_iommu_group_with_drivers_and_network_interfaces(groups: Path) -> None:
    s = Sysfs(groups, modprobe=False)
    assert s.group("2") == (
        pci.Peer("0000:00:1f.6", "0x020000", "e1000e", ("eno1",)),
        pci.Peer("0000:03:00.0", pci.NVME_CLASS, "nvme"),
    )
    assert s.group(None) == () and s.group("99") == ()


def test_a_drive_sharing_its_iommu_group_with_the_nic_is_refused_naming_the_nic(groups: Path) -> None:
    with pytest.raises(BadInput) as e:
        _claim(groups, "0000:03:00.0")
    assert e.value.field == "address"
    msg = e.value.message
    assert "IOMMU group 2" in msg and "0000:00:1f.6 (network controller, driver e1000e, eno1)" in msg


def test_a_drive_sharing_its_iommu_group_with_the_boot_drive_is_refused(groups: Path) -> None:
    with pytest.raises(BadInput) as e:
        _claim(groups, "0000:02:00.0")
    msg = e.value.message
    assert "IOMMU group 1" in msg and "0000:01:00.0 (NVMe drive nvme0: it is the boot drive" in msg
    assert "pcieport" not in msg  # the bridge of the group does not stand in the way


def test_free_drives_of_one_group_go_to_spdk_together_bridge_and_unbound_functions_aside(
    groups: Path,
) -> None:
    plan = _claim(groups, "0000:05:00.0")
    assert (plan.driver, plan.also) == ("vfio-pci", ("0000:06:00.0",))
    assert "0000:06:00.0 shares IOMMU group 3" in plan.notes[0]
    alone = _claim(groups, "0000:07:00.0")
    assert (alone.driver, alone.also, alone.notes) == ("vfio-pci", (), ())


def test_without_an_iommu_the_group_does_not_matter_and_uio_is_said(groups: Path) -> None:
    s = Sysfs(groups, modprobe=False)
    plan = claim_plan("0000:03:00.0", s.functions(), s.mounts(), s.swaps(), False, s.group("2"))
    assert plan.driver == "uio_pci_generic" and plan.also == ()
    assert "no IOMMU: uio_pci_generic, as SPDK's setup script does" in plan.notes[0]
