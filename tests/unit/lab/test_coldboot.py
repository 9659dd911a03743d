"""A disk-booted VM's reboots as cold starts (tests/tooling/nodeos_devtools/lab/coldboot.py), with a stand-in
for QEMU
that speaks just enough QMP: a reset starts the same argv again, a power-off ends the supervisor,
and the lab's power-off kills the supervisor and its QEMU together."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from nodeos_devtools.lab import coldboot, qemu

# Stand-in QEMU: serves the monitor named by its last `-qmp unix:PATH,...`, counts its starts in
# starts.txt, emits SHUTDOWN with the reason of line <start> of reasons.txt, exits 0; with no
# such line it runs until killed (its pid in qemu.pid).
FAKE_QEMU = """
import json, os, socket, sys, time
from pathlib import Path
here = Path(sys.argv[0]).parent
path = [a for a in sys.argv if a.startswith("unix:")][-1][5:].split(",")[0]
n = int((here / "starts.txt").read_text()) + 1 if (here / "starts.txt").exists() else 1
(here / "starts.txt").write_text(str(n))
(here / "qemu.pid").write_text(str(os.getpid()))
reasons = (here / "reasons.txt").read_text().split()
if n > len(reasons):
    while True:
        time.sleep(1)
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(1)
c, _ = srv.accept()
c.sendall(b'{"QMP": {}}\\n')
c.recv(1000)
c.sendall(b'{"return": {}}\\n')
event = {"event": "SHUTDOWN", "data": {"guest": True, "reason": reasons[n - 1]}}
c.sendall(json.dumps(event).encode() + b"\\n")
c.close()
"""


def _setup(tmp_path: Path, reasons: list[str]) -> list[str]:
    script = tmp_path / "fake_qemu.py"
    script.write_text(FAKE_QEMU)
    (tmp_path / "reasons.txt").write_text(" ".join(reasons))
    return coldboot.wrap([sys.executable, str(script), "-name", "nodeos-lab-t-s1"], tmp_path)


def test_the_supervisor_runs_qemu_without_in_place_reboot_and_keeps_the_lab_tag(tmp_path: Path) -> None:
    argv = coldboot.wrap(["qemu", "-name", "nodeos-lab-t-s1", "-m", "512"], tmp_path)
    assert argv[:3] == [sys.executable, "-c", coldboot.ENTRY]
    qemu_argv = argv[argv.index("--") + 1 :]
    assert qemu_argv[:4] == ["qemu", "-name", "nodeos-lab-t-s1", "-m"]
    assert "-no-reboot" in qemu_argv
    assert f"unix:{tmp_path / coldboot.LOOP_QMP},server=on,wait=off" in qemu_argv
    # The lab's PID check (is_ours) reads `-name TAG` in the supervisor's own command line.
    assert b"\0-name\0nodeos-lab-t-s1\0" in b"\0".join(a.encode() for a in argv) + b"\0"


def test_only_a_reset_with_a_clean_exit_starts_the_vm_again() -> None:
    assert coldboot.restarts("guest-reset", 0) and coldboot.restarts("host-qmp-system-reset", 0)
    assert not coldboot.restarts("guest-shutdown", 0), "a powered-off server stays off"
    assert not coldboot.restarts("guest-reset", 1), "QEMU failed: no loop of failures"
    assert not coldboot.restarts(None, 0), "no event seen: not known to be a reset"


def test_each_reset_is_a_cold_start_of_the_same_argv_until_power_off(tmp_path: Path) -> None:
    argv = _setup(tmp_path, ["guest-reset", "host-qmp-system-reset", "guest-reset", "guest-shutdown"])
    rc = coldboot.main(argv[3:])
    assert rc == 0
    assert (tmp_path / "starts.txt").read_text() == "4", "three resets, three cold starts"
    banners = (tmp_path / "console.log").read_text().count("===== nodeos-lab: ")
    assert banners == 3, (tmp_path / "console.log").read_text()


def test_the_labs_power_off_kills_the_supervisor_and_its_qemu(tmp_path: Path) -> None:
    argv = _setup(tmp_path, ["guest-reset"])  # one reset, then a QEMU that runs until killed
    proc = subprocess.Popen(argv, start_new_session=True, cwd=Path(__file__).resolve().parents[3])
    try:
        deadline = time.monotonic() + 30
        while (tmp_path / "starts.txt").read_text() != "2" if (tmp_path / "starts.txt").exists() else True:
            assert time.monotonic() < deadline and proc.poll() is None, "no second start"
            time.sleep(0.1)
        time.sleep(0.3)
        child = int((tmp_path / "qemu.pid").read_text())
        assert qemu.is_ours(proc.pid, "nodeos-lab-t-s1")
        qemu.kill(proc.pid, "nodeos-lab-t-s1")
        assert not qemu.is_ours(proc.pid, "nodeos-lab-t-s1")
        assert not Path(f"/proc/{child}").exists() or qemu.proc_state(f"/proc/{child}/stat") in ("Z", "X")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
