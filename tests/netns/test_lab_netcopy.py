"""`Lab.copy` over the lab network (nodeos_devtools/lab/netcopy.py), between two real network
namespaces: the host's side serves the file on its address, the 'VM' fetches it with its own
Python over a veth pair, and the copy is whole and checked, or refused."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nodeos.errors import OperationFailed
from nodeos_devtools.lab import netcopy
from tests.netns.conftest import Netns


def _runner(vm_ns: Netns, rewrite: Path | None = None) -> netcopy.Run:
    def run(vm: str, argv: list[str], timeout: float) -> tuple[int, str, str]:
        if rewrite is not None and argv[:2] == ["python3", "-c"]:  # the file changes while it is served
            with open(rewrite, "r+b") as f:
                f.write(b"X")
        r = subprocess.run(
            ["ip", "netns", "exec", vm_ns.name, *argv], capture_output=True, text=True, timeout=timeout
        )
        return r.returncode, r.stdout, r.stderr

    return run


def test_a_file_crosses_the_lab_network_whole(pair: tuple[Netns, Netns], tmp_path: Path) -> None:
    lab_ns, vm_ns = pair
    src = tmp_path / "bundle.raucb"
    src.write_bytes(os.urandom(3 << 20) + b"end")
    dest = tmp_path / "in-vm" / "bundle.part"
    dest.parent.mkdir()
    n = netcopy.copy(lab_ns.name, "10.0.0.1", str(src), "s1", str(dest), _runner(vm_ns), 60)
    assert n == src.stat().st_size and dest.read_bytes() == src.read_bytes()


def test_a_copy_that_arrives_different_is_refused_and_removed(
    pair: tuple[Netns, Netns], tmp_path: Path
) -> None:
    lab_ns, vm_ns = pair
    src = tmp_path / "bundle.raucb"
    src.write_bytes(os.urandom(1 << 20))
    dest = tmp_path / "bundle.part"
    with pytest.raises(OperationFailed, match="SHA-256"):
        netcopy.copy(lab_ns.name, "10.0.0.1", str(src), "s1", str(dest), _runner(vm_ns, rewrite=src), 60)
    assert not dest.exists()


def test_a_vm_that_cannot_reach_the_host_fails_the_copy(pair: tuple[Netns, Netns], tmp_path: Path) -> None:
    """What VmAccess.copy then falls back from (to the guest agent)."""
    lab_ns, vm_ns = pair
    vm_ns.ip("link", "set", "vb", "down")
    src = tmp_path / "f"
    src.write_bytes(b"x" * 1000)
    with pytest.raises(OperationFailed, match="could not fetch"):
        netcopy.copy(lab_ns.name, "10.0.0.1", str(src), "s1", str(tmp_path / "g"), _runner(vm_ns), 60)
