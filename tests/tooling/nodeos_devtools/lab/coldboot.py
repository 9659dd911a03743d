"""A disk-booted VM's reboots as cold starts (docs/lab.md "Booting the real disk").

Under TCG, OVMF's in-place reset (`reboot` in the guest, or QMP `system_reset`) now and then never
left the firmware (CI, 2026-11-30: 1 of 9 resets; no output, CPU busy in DXE code), while every
one of hundreds of cold starts booted. So a disk-booted storage VM runs under this small
supervisor: QEMU with `-no-reboot` (a reset request makes it exit), and when it exited because of
a reset (QMP's SHUTDOWN event, reason `guest-reset` or `host-qmp-system-reset`), the same argv is
started again at once: the same qcow2 disk and the same OVMF variable store, so the EFI variables
and systemd-boot's boot counters (ESP file names) persist as across a server's reset. A guest
power-off, a crash of QEMU or a signal ends the supervisor with QEMU's status.

The supervisor's argv holds QEMU's (its `-name` tag), so the lab's PID checks hold for it; it is
the leader of its process group (the lab starts it in a new session), QEMU dies with it
(PR_SET_PDEATHSIG), and the lab's power-off kills the whole group (tests/tooling/nodeos_devtools/lab/qemu.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

LOOP_QMP = "coldboot-qmp.sock"
RESET_REASONS = ("guest-reset", "host-qmp-system-reset")
_PR_SET_PDEATHSIG = 1
# Not `-m nodeos_devtools.lab.coldboot`: the package imports this module first (runpy warns).
ENTRY = "import sys; from nodeos_devtools.lab.coldboot import main; sys.exit(main(sys.argv[1:]))"


def wrap(argv: list[str], vm_dir: Path) -> list[str]:
    """The supervisor's argv that runs QEMU `argv` with -no-reboot and a monitor of its own (pure)."""
    sock = vm_dir / LOOP_QMP
    qemu_argv = [*argv, "-no-reboot", "-qmp", f"unix:{sock},server=on,wait=off"]
    return [sys.executable, "-c", ENTRY, str(sock), str(vm_dir / "console.log"), "--", *qemu_argv]


def restarts(reason: str | None, rc: int) -> bool:
    """Whether QEMU's end was a reset of the machine (start it again) rather than its end."""
    return rc == 0 and reason in RESET_REASONS


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def shutdown_reason(sock_path: Path, proc: subprocess.Popen[bytes]) -> str | None:
    """Follows QEMU's events on its own monitor until it exits: the last SHUTDOWN event's reason."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    while True:  # QEMU makes the socket before the guest runs; retry until it is there
        if proc.poll() is not None:
            s.close()
            return None
        try:
            s.connect(str(sock_path))
            break
        except OSError:
            time.sleep(0.2)
    reason = None
    buf = b""
    with s:
        s.sendall(b'{"execute": "qmp_capabilities"}\n')
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                with contextlib.suppress(ValueError):
                    msg = json.loads(line)
                    if isinstance(msg, dict) and msg.get("event") == "SHUTDOWN":
                        reason = str(msg.get("data", {}).get("reason"))
    return reason


def run(qemu_argv: list[str], sock_path: Path, console: Path) -> int:
    starts = 0
    while True:
        sock_path.unlink(missing_ok=True)
        proc = subprocess.Popen(qemu_argv, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        starts += 1
        reason = shutdown_reason(sock_path, proc)
        rc = proc.wait()
        if not restarts(reason, rc):
            print(f"nodeos-lab coldboot: QEMU ended (status {rc}, reason {reason}) after {starts} start(s)",
                  file=sys.stderr, flush=True)  # fmt: skip
            return rc if rc >= 0 else 128 - rc
        with open(console, "ab") as f:
            stamp = time.strftime("%F %T")
            f.write(f"\n===== nodeos-lab: {reason}: cold start {starts + 1} at {stamp} =====\n".encode())


def main(args: list[str]) -> int:
    sock, console, sep, *qemu_argv = args
    assert sep == "--" and qemu_argv, "usage: coldboot SOCK CONSOLE -- QEMU ARGV..."
    return run(qemu_argv, Path(sock), Path(console))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
