"""`nodeos-lab` as an operator runs it: separate processes, exit codes, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos_devtools.lab import Lab
from nodeos_devtools.lab.state import labs_root
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

pytestmark = pytest.mark.lab
NAME = "t-cli"
CLI = [sys.executable, "-c", "from nodeos_devtools.lab.cli import main; main()"]


def run(*args: str, input: bytes | None = None, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    if input is None:
        return subprocess.run(
            [*CLI, *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    return subprocess.run([*CLI, *args], capture_output=True, input=input, timeout=timeout, check=False)


def qemu_pids(lab: str) -> list[int]:
    pids = []
    needle = f"\0-name\0nodeos-lab-{lab}-".encode()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmd:
                pids.append(int(p.name))
    return pids


def netns_list() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout


def all_taps() -> str:
    """Tap devices in the root namespace (the lab's live only inside its own namespace)."""
    return subprocess.run(["ip", "-o", "link", "show", "type", "tun"], capture_output=True, text=True).stdout


def assert_nothing_left(lab: str) -> None:
    assert qemu_pids(lab) == []
    assert f"nodeos-lab-{lab}" not in netns_list()
    assert not (labs_root() / lab).exists()
    assert "tap-" not in all_taps()


@pytest.fixture(scope="module")
def cli_lab() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("the VM lab needs root (network namespaces, taps)")
    Lab(NAME).down()
    try:
        yield NAME
    finally:
        Lab(NAME).down()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["up", "--storage", "0"], "storage"),
        (["up", "--storage", "9"], "storage"),
        (["up", "--drives", "0"], "drives"),
        (["up", "--hosts", "-1"], "hosts"),
        (["up", "--drive-size", "1"], "drive_size_mib"),
        (["--name", "Bad_Name", "up"], "name"),
        (["up", "--storage", "two"], "storage"),
        (["up", "--label", "s1:rack=a"], "label"),
        (["up", "--storage", "2", "--cluster", "--label", "s3:rack=a"], "label"),
        (["up", "--cluster", "--label", "s1:rack"], "label"),
        (["up", "--cluster", "--no-labels", "--label", "s1:rack=a"], "label"),
        (["up", "--boot", "pxe"], "boot"),
        (["up", "--boot", "disk", "--provision", "s2=/etc/hostname"], "provision"),
        (["up", "--boot", "disk", "--provision", "s1=/nonexistent/s1.toml"], "provision"),
        (["up", "--provision", "s1"], "provision"),
        (["copy", "/nonexistent/bundle.raucb", "s1:/root/b.raucb"], "file"),
        (["copy", "/etc/hostname", "s1"], "dest"),
    ],
)
def test_bad_counts_and_names_exit_2_and_start_nothing(cli_lab: str, args: list[str], field: str) -> None:
    if args[0] != "--name":
        args = ["--name", cli_lab, *args]
    r = run(*args)
    assert r.returncode == 2, r.stderr
    assert field.replace("_mib", "").replace("_", "-") in r.stderr.lower().replace("_mib", "").replace(
        "_", "-"
    )
    assert_nothing_left(cli_lab)


def test_cluster_labels_without_the_label_command_exit_1_before_booting(cli_lab: str) -> None:
    from nodeos_devtools.lab.cluster import label_command_available

    if label_command_available():
        pytest.skip("this build has `nodeos node label`: labels are applied (tests/lab/test_lab_cluster.py)")
    r = run("--name", cli_lab, "up", "--storage", "2", "--cluster")
    assert r.returncode == 1, r.stderr
    assert "nodeos node label" in r.stderr and "--no-labels" in r.stderr
    assert_nothing_left(cli_lab)


def test_missing_qemu_or_kernel_exits_1_and_starts_nothing(cli_lab: str) -> None:
    r = run("--name", cli_lab, "up", "--qemu", "/nonexistent/qemu-system-x86_64")
    assert r.returncode == 1, r.stderr
    assert "QEMU not found" in r.stderr
    assert_nothing_left(cli_lab)
    r = run("--name", cli_lab, "up", "--kernel", "/nonexistent/vmlinuz")
    assert r.returncode == 1, r.stderr
    assert "kernel" in r.stderr and "/nonexistent/vmlinuz" in r.stderr
    assert_nothing_left(cli_lab)


def test_a_lab_that_is_not_up_is_reported(cli_lab: str) -> None:
    r = run("--name", cli_lab, "exec", "s1", "--", "true")
    assert r.returncode == 2 and "not up" in r.stderr


# Its own boot costs CI ~5 min; the README's demo drives the same `up`/`exec`/`down` on every
# fresh machine it is run on.
@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_up_exec_status_bad_vm_second_up_and_down(cli_lab: str) -> None:
    r = run("--name", cli_lab, "up", "--storage", "1", "--drives", "1", "--hosts", "0")
    assert r.returncode == 0, r.stderr
    assert "s1" in r.stdout and "running" in r.stdout
    pids = qemu_pids(cli_lab)
    assert len(pids) == 1

    st = json.loads(run("--name", cli_lab, "status", "--json").stdout)
    assert [(v["name"], v["state"], v["drives"]) for v in st["vms"]] == [("s1", "running", ["NODEOS-s1-0"])]
    assert st["subnet"].startswith("198.1") and st["netns"] == f"nodeos-lab-{cli_lab}"

    # exec: output and exit code of the command inside, stdin passed through.
    r = run("--name", cli_lab, "exec", "s1", "--", "sh", "-c", "hostname; cat; exit 7", input=b"from-stdin\n")
    assert r.returncode == 7
    assert r.stdout.decode().split() == ["s1", "from-stdin"]

    r = run("--name", cli_lab, "exec", "s9", "--", "true")
    assert r.returncode == 2 and "s9" in r.stderr and "s1" in r.stderr  # names the allowed VMs
    for cmd in ("kill", "start", "cut", "heal", "logs"):
        r = run("--name", cli_lab, cmd, "nosuchvm")
        assert r.returncode == 2, (cmd, r.stderr)

    r = run("--name", cli_lab, "up", "--storage", "1", "--drives", "1", "--hosts", "0")
    assert r.returncode == 2 and "already up" in r.stderr
    assert qemu_pids(cli_lab) == pids  # the running lab is untouched
    assert run("--name", cli_lab, "exec", "s1", "--", "true").returncode == 0

    logs = run("--name", cli_lab, "logs", "s1")
    assert logs.returncode == 0 and "Linux version" in logs.stdout

    r = run("--name", cli_lab, "down")
    assert r.returncode == 0, r.stderr
    assert_nothing_left(cli_lab)
