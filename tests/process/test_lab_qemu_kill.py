"""The lab's power-off waits for every thread of the killed QEMU: a killed multi-threaded process
shows its main thread as a zombie while other threads still hold its files (the tap), and a boot
started then fails with "could not configure /dev/net/tun: Device or resource busy" (CI, stop 19)."""

from __future__ import annotations

import subprocess
import sys
import time

from nodeos_devtools.lab import qemu

# The main thread ends (pthread_exit) and leaves a worker thread running: the state a killed
# QEMU is in while its other threads tear down.
LEADER_GONE_WORKER_ALIVE = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(60,)).start()
print("ready", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def _state(pid: int) -> str:
    return qemu.proc_state(f"/proc/{pid}/stat")


def test_a_zombie_main_thread_with_a_live_thread_is_still_exiting() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", LEADER_GONE_WORKER_ALIVE, "-name", "kill-test"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while _state(p.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(p.pid) == "Z"  # the main thread is a zombie ...
        assert qemu._exiting(p.pid)  # ... yet a thread lives: not gone
    finally:
        p.kill()
        p.wait(timeout=10)
    assert not qemu._exiting(p.pid)  # reaped: gone


def test_kill_returns_once_every_thread_is_gone() -> None:
    tag = "kill-test-2"
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import threading, time\n"
            "threading.Thread(target=time.sleep, args=(60,)).start()\nprint('ready', flush=True)\n"
            "time.sleep(60)",
            "-name",
            tag,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    assert qemu.is_ours(p.pid, tag)
    qemu.kill(p.pid, tag)
    assert not qemu._exiting(p.pid)
    assert p.stdout.read() == ""  # its end of the pipe is closed: its files are released
    p.wait(timeout=1)
