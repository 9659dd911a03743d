"""A drive gone from the machine: the cheap sysfs scan no longer lists it, its pool is named with
it, and the node's drive report keeps it with health "missing" (its inventory entry is gone)."""

from __future__ import annotations

from pathlib import Path

from nodeos.node import inventory


def sysfs(root: Path, **ctrls: str) -> Path:
    """/sys/class/nvme as the kernel lays it out: a directory per controller, a namespace under it."""
    for ctrl, serial in ctrls.items():
        ns = root / ctrl / f"{ctrl}n1"
        ns.mkdir(parents=True)
        (root / ctrl / "serial").write_text(f"{serial}   \n")
        (ns / "size").write_text("2097152\n")
    return root


def test_a_pulled_drive_leaves_the_scan_and_its_pool_names_it(tmp_path: Path) -> None:
    root = sysfs(tmp_path / "nvme", nvme0="NODEOS-s1-0", nvme1="NODEOS-s1-1")
    assert inventory.present_drive_ids(root) == {"NODEOS-s1-0", "NODEOS-s1-1"}
    pools = {"pa": ["NODEOS-s1-0"], "pb": ["NODEOS-s1-1"]}
    assert inventory.missing_pool_drives(pools, inventory.present_drive_ids(root)) == {}
    for f in sorted((root / "nvme1").rglob("*"), reverse=True):  # the controller goes away
        f.rmdir() if f.is_dir() else f.unlink()
    (root / "nvme1").rmdir()
    missing = inventory.missing_pool_drives(pools, inventory.present_drive_ids(root))
    assert missing == {"pb": ["NODEOS-s1-1"]}
    report = {"NODEOS-s1-0": {"serial": "NODEOS-s1-0", "health": "ok"}}  # the inventory without it
    assert inventory.mark_missing(report, missing) == {
        "NODEOS-s1-0": {"serial": "NODEOS-s1-0", "health": "ok"},
        "NODEOS-s1-1": {"serial": "NODEOS-s1-1", "health": "missing"},
    }
    assert report == {"NODEOS-s1-0": {"serial": "NODEOS-s1-0", "health": "ok"}}  # not changed in place


def test_no_nvme_class_means_no_drive_present(tmp_path: Path) -> None:
    assert inventory.present_drive_ids(tmp_path / "absent") == set()
