"""Where the lab waits on a VM and fails, a guest kernel that died is named (no VMs: a lab
directory with a console file, and a fake guest agent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeos.errors import OperationFailed
from nodeos_devtools.lab import Lab, qemu
from nodeos_devtools.lab.cli import _print_status
from nodeos_devtools.lab.console_scan import BOOT_MARKER, GuestKernelCrashed
from nodeos_devtools.lab.plan import plan_vms
from nodeos_devtools.lab.qga import AgentUnavailable, ExecResult

OOPS = """\
[  223.705950] BUG: kernel NULL pointer dereference, address: 0000000000000008
[  223.706704] Oops: Oops: 0002 [#1] PREEMPT SMP NOPTI
[  223.707796] RIP: 0010:net_rx_action+0xef/0x420
[  223.709327] Call Trace:
[  223.710417]  <TASK>
[  223.711021]  rxe_xmit_packet+0x27a/0x300 [rdma_rxe]
[  223.711130]  send_common_ack.isra.0+0x58/0xb0 [rdma_rxe]
[  223.711219]  rxe_receiver+0x1d5c/0x24e0 [rdma_rxe]
[  223.711957]  </TASK>
[  223.713485] ---[ end trace 0000000000000000 ]---
"""
BOOT = f"{BOOT_MARKER}h1 at 2026-11-29 03:00:00 =====\n[    0.000000] Linux version 6.12.117+deb13-amd64\n"


class FakeAgent:
    def __init__(self, console: Path, *, lost: bool = False, writes: str = "", rc: int = 0) -> None:
        self.console, self.lost, self.writes, self.rc = console, lost, writes, rc

    def exec(self, argv: list[str], **kw: Any) -> ExecResult:
        with open(self.console, "a") as f:
            f.write(self.writes)  # what the kernel printed while the command ran
        if self.lost:
            raise AgentUnavailable(f"guest agent at {self.console.parent}/qga.sock did not answer in 30 s")
        return ExecResult(rc=self.rc, stdout_bytes=b"", stderr_bytes=b"dd: error reading: I/O error")


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lab:
    the_lab = Lab("t-crash", root=tmp_path / "labs", progress=lambda m: None)
    the_lab.dir.mkdir(parents=True)
    vms = plan_vms("t-crash", 0, storage=1, drives=1, hosts=1, drive_dir=tmp_path)
    for v in vms:
        v.pid = 4242
        the_lab.vm_dir(v.name).mkdir(parents=True)
        (the_lab.vm_dir(v.name) / "console.log").write_text(BOOT)
    st = {"name": "t-crash", "subnet": 0, "accel": "tcg", "image": "/img", "vms": {v.name: v for v in vms}}
    the_lab._save(st)
    monkeypatch.setattr(qemu, "is_ours", lambda pid, tag: True)  # every VM's QEMU is "running"
    return the_lab


def _use(lab: Lab, monkeypatch: pytest.MonkeyPatch, agent: FakeAgent) -> None:
    monkeypatch.setattr(lab, "_running_agent", lambda vm, argv: agent)


def test_an_agent_timeout_after_a_kernel_oops_says_the_kernel_crashed(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    console = lab.vm_dir("h1") / "console.log"
    _use(lab, monkeypatch, FakeAgent(console, lost=True, writes=OOPS))
    with pytest.raises(GuestKernelCrashed) as e:
        lab.exec("h1", ["dd", "if=/dev/nvme0n1"])
    first = str(e.value).splitlines()[0]
    assert first == (
        "VM h1's kernel crashed: BUG: kernel NULL pointer dereference, address: 0000000000000008 "
        "(via rdma_rxe): rxe_receiver -> send_common_ack -> rxe_xmit_packet -> net_rx_action "
        f"(console: {console})"
    )
    assert "did not answer in 30 s" in str(e.value)  # what the lab saw is kept below it
    assert isinstance(e.value, AgentUnavailable)  # callers that handle a lost agent still do


def test_an_agent_timeout_with_a_healthy_kernel_shows_the_console_tail(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(lab, monkeypatch, FakeAgent(lab.vm_dir("h1") / "console.log", lost=True))
    with pytest.raises(AgentUnavailable) as e:
        lab.exec("h1", ["true"])
    assert not isinstance(e.value, GuestKernelCrashed)
    assert "kernel" not in str(e.value).splitlines()[0] and "h1's console, last lines:" in str(e.value)


def test_a_failed_command_names_a_crash_during_it_but_not_one_before(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    console = lab.vm_dir("h1") / "console.log"
    _use(lab, monkeypatch, FakeAgent(console, writes=OOPS, rc=1))
    with pytest.raises(OperationFailed) as e:
        lab.exec("h1", ["dd", "if=/dev/nvme0n1"], check=True)
    assert str(e.value).startswith("VM h1's kernel crashed: BUG: kernel NULL pointer dereference")
    assert "exited 1" in str(e.value)
    # The oops is in the console now; a later command that fails on its own is not blamed on it.
    _use(lab, monkeypatch, FakeAgent(console, rc=1))
    with pytest.raises(OperationFailed) as e:
        lab.exec("h1", ["false"], check=True)
    assert str(e.value).startswith("h1: ['false'] exited 1")


def test_status_shows_a_vm_whose_kernel_crashed(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    console = lab.vm_dir("h1") / "console.log"
    with open(console, "a") as f:
        f.write(OOPS)
    st = lab.status()
    rows = {r["name"]: r for r in st["vms"]}
    assert rows["s1"]["state"] == "running" and "crash" not in rows["s1"]
    assert rows["h1"]["state"] == "crashed"
    assert rows["h1"]["crash"].startswith("BUG: kernel NULL pointer dereference")
    _print_status(st, as_json=False)
    out = capsys.readouterr().out
    assert (
        "      crashed: BUG: kernel NULL pointer dereference, address: 0000000000000008 (via rdma_rxe)" in out
    )
    assert f"(console: {console})" in out
    # Booted again (the lab writes its marker first): the crash was the previous boot's.
    with open(console, "a") as f:
        f.write(BOOT)
    assert {r["name"]: r["state"] for r in lab.status()["vms"]}["h1"] == "running"


def test_a_kernel_that_dies_while_booting_fails_the_wait_at_once(lab: Lab) -> None:
    with open(lab.vm_dir("s1") / "console.log", "a") as f:
        f.write("[    2.9] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\n")
    with pytest.raises(GuestKernelCrashed, match=r"^VM s1's kernel crashed: Kernel panic - not syncing: VFS"):
        lab.wait_ready("s1", timeout=600)
