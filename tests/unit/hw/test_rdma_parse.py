"""RDMA sysfs text parsers (pure)."""

from __future__ import annotations

from pathlib import Path

from nodeos.hw.rdma import from_sysfs, parse_state


def test_state_text() -> None:
    assert parse_state("4: ACTIVE\n") == "ACTIVE"
    assert parse_state("1: DOWN") == "DOWN"
    assert parse_state("") == "UNKNOWN"


def test_absent_sysfs_means_no_ports(tmp_path: Path) -> None:
    assert from_sysfs(tmp_path / "missing") == []
