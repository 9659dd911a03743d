"""The default data plane (issue 27): a node whose image carries SPDK and which has NVMe drives
runs SPDK; the operator can pin one; without SPDK in the image, the kernel target. The SPDK
target's unit starts on the same decision (`nodeos-spdk-setup wanted`, its ExecCondition)."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.select import auto_choice, choose_why, nvme_drives
from nodeos.dataplane.spdk import target_setup
from nodeos.dataplane.spdk.backend import SpdkDataPlane

SYSTEMD = Path(__file__).resolve().parents[3] / "systemd"


def pci_tree(root: Path, functions: dict[str, str]) -> Path:
    """/sys/bus/pci/devices as Linux lays it out: one directory per function with its class."""
    devs = root / "sys/bus/pci/devices"
    devs.mkdir(parents=True)
    for addr, cls in functions.items():
        (devs / addr).mkdir()
        (devs / addr / "class").write_text(cls + "\n")
    return devs


SERVER = {
    "0000:00:1f.2": "0x010601",  # AHCI (boot drive)
    "0000:03:00.0": "0x010802",  # NVMe
    "0000:04:00.0": "0x010802",  # NVMe
    "0000:05:00.0": "0x020000",  # Ethernet
}


def nvmet(tmp_path: Path) -> Path:
    root = tmp_path / "nvmet"
    for d in ("subsystems", "ports", "hosts"):
        (root / d).mkdir(parents=True)
    return root


def test_nvme_drives_are_the_nvme_class_functions_whatever_their_driver(tmp_path: Path) -> None:
    assert nvme_drives(pci_tree(tmp_path, SERVER)) == ["0000:03:00.0", "0000:04:00.0"]
    assert nvme_drives(tmp_path / "no-sysfs") == []


@pytest.mark.parametrize(
    ("answering", "target", "drives", "want"),
    [
        (False, True, ["0000:03:00.0"], "spdk"),  # the image carries SPDK, the node has a drive
        (False, True, [], "kernel"),  # SPDK in the image, no NVMe drive
        (False, False, ["0000:03:00.0"], "kernel"),  # no SPDK in the image
        (True, False, [], "spdk"),  # a target an operator started by hand still counts
    ],
)
def test_auto_choice(answering: bool, target: bool, drives: list[str], want: str) -> None:
    backend, why = auto_choice(answering, target, drives)
    assert backend == want
    assert why.startswith("auto: ")


def test_the_reason_names_what_decided() -> None:
    assert (
        "2 NVMe drives (0000:03:00.0, 0000:04:00.0)"
        in auto_choice(False, True, ["0000:03:00.0", "0000:04:00.0"])[1]
    )
    assert "no NVMe drive" in auto_choice(False, True, [])[1]
    assert "no SPDK target in the image" in auto_choice(False, False, [])[1]


def test_spdk_image_with_nvme_drives_runs_spdk_even_before_the_target_answers(tmp_path: Path) -> None:
    target = tmp_path / "nvmf_tgt"
    target.write_text("")
    dp, why = choose_why(
        "auto",
        spdk_socket=str(tmp_path / "spdk.sock"),  # nothing answers yet: the watch shows it DOWN
        configfs_root=nvmet(tmp_path),
        spdk_target=target,
        pci_devices=pci_tree(tmp_path, SERVER),
    )
    assert isinstance(dp, SpdkDataPlane) and "the image carries SPDK" in why


def test_spdk_image_without_nvme_drives_runs_the_kernel_target(tmp_path: Path) -> None:
    target = tmp_path / "nvmf_tgt"
    target.write_text("")
    dp, why = choose_why(
        "auto",
        spdk_socket=str(tmp_path / "spdk.sock"),
        configfs_root=nvmet(tmp_path),
        spdk_target=target,
        pci_devices=pci_tree(tmp_path, {"0000:00:1f.2": "0x010601"}),
    )
    assert isinstance(dp, KernelDataPlane) and "no NVMe drive" in why


def test_kernel_image_with_nvme_drives_runs_the_kernel_target(tmp_path: Path) -> None:
    dp, why = choose_why(
        "auto",
        spdk_socket=str(tmp_path / "spdk.sock"),
        configfs_root=nvmet(tmp_path),
        spdk_target=tmp_path / "absent",
        pci_devices=pci_tree(tmp_path, SERVER),
    )
    assert isinstance(dp, KernelDataPlane) and "no SPDK target in the image" in why


def test_the_operator_can_pin_the_kernel_target_on_an_spdk_image(tmp_path: Path) -> None:
    target = tmp_path / "nvmf_tgt"
    target.write_text("")
    dp, why = choose_why(
        "kernel",
        configfs_root=nvmet(tmp_path),
        spdk_target=target,
        pci_devices=pci_tree(tmp_path, SERVER),
    )
    assert isinstance(dp, KernelDataPlane) and why == "pinned: dataplane kernel"


# ---- the target's unit starts on the same decision ---------------------------------------


def test_the_unit_asks_nodeos_spdk_setup_wanted_before_it_starts() -> None:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string((SYSTEMD / "nodeos-spdk.service").read_text())
    assert cp["Service"]["ExecCondition"].split() == ["/usr/bin/nodeos-spdk-setup", "wanted"]
    after = cp["Unit"]["After"].split()
    assert "nodeos-provision.service" in after  # provisioning may pin `dataplane` first


@pytest.mark.parametrize(
    ("toml", "drives", "start"),
    [
        (None, ["0000:03:00.0"], True),  # no config: auto, with a drive
        (None, [], False),  # auto, no drive
        ('dataplane = "auto"\n', ["0000:03:00.0"], True),
        ('dataplane = "kernel"\n', ["0000:03:00.0"], False),  # pinned by the operator
        ('dataplane = "none"\n', ["0000:03:00.0"], False),  # a witness
        ('dataplane = "spdk"\n', [], True),  # pinned: started even without a drive yet
        ("dataplane = [\n", ["0000:03:00.0"], False),  # a broken file is nodeosd's to report
    ],
)
def test_wanted(tmp_path: Path, toml: str | None, drives: list[str], start: bool) -> None:
    cfg = tmp_path / "nodeosd.toml"
    if toml is not None:
        cfg.write_text(toml)
    yes, why = target_setup.wanted(cfg, drives)
    assert yes is start and why


def test_wanted_exit_codes_skip_the_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "nodeosd.toml"
    cfg.write_text('dataplane = "kernel"\n')
    assert target_setup.main(["wanted", "--config", str(cfg)]) == 1  # ExecCondition 1: skipped
    assert "not started" in capsys.readouterr().out
    cfg.write_text('dataplane = "spdk"\n')
    assert target_setup.main(["wanted", "--config", str(cfg)]) == 0


def test_hugetlbfs_is_found_in_the_mount_table() -> None:
    mounts = "sysfs /sys sysfs rw 0 0\nnodev /mnt/huge hugetlbfs rw,relatime,pagesize=2M 0 0\n"
    assert target_setup.hugetlbfs_mounted(mounts)
    # The lab masks dev-hugepages.mount: nothing; a tmpfs at that path is not one either.
    assert not target_setup.hugetlbfs_mounted("sysfs /sys sysfs rw 0 0\n")
    assert not target_setup.hugetlbfs_mounted("hugetlbfs /dev/hugepages tmpfs rw 0 0\n")


def test_a_mounted_hugetlbfs_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[object] = []
    monkeypatch.setattr(target_setup.subprocess, "run", lambda *a, **k: ran.append(a))  # never mount here
    mounts = tmp_path / "mounts"
    mounts.write_text("nodev /mnt/huge hugetlbfs rw 0 0\n")
    assert target_setup.ensure_hugetlbfs(mounts, tmp_path / "never") == ""
    assert not (tmp_path / "never").exists() and ran == []
