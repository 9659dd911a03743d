"""Reaching a lab VM's /metrics from the lab's network namespace, as an operator's Prometheus
reaches the management address.

A lab VM has one network, its storage network, and nodeosd refuses to serve /metrics on a
storage address, so in the lab it serves them on the VM's loopback (tests/tooling/nodeos_devtools/lab/guest/
nodeos-lab-init.sh). A plain TCP relay in the VM (a transient systemd unit running the Python
below) passes RELAY_PORT on the VM's lab address to that loopback endpoint: the bytes Prometheus
reads are nodeosd's own. Test and bench scaffolding, not part of the product."""

from __future__ import annotations

import subprocess
import time
import urllib.parse

from nodeos_devtools.lab import Lab
from tests.lab.node_helpers import ok

RELAY_PORT = 9811
RELAY_UNIT = "nodeos-test-metrics-relay"
RELAY = """
import socket, sys, threading
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
while True:
    c, _ = srv.accept()
    try:
        u = socket.create_connection((sys.argv[3], int(sys.argv[4])), timeout=5)
    except OSError:  # nodeosd down: the scrape fails, as it would
        c.close()
        continue
    u.settimeout(None)
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
"""


def start_relay(lab: Lab, vm: str) -> str:
    """Starts the relay in vm; returns the scrape target host:port on the lab network."""
    url = urllib.parse.urlsplit(ok(lab, vm, "status")["observe"]["metrics_url"])
    # A leftover of an interrupted earlier run goes first.
    lab.sh(
        vm, f"systemctl stop {RELAY_UNIT} || true; systemctl reset-failed {RELAY_UNIT} 2>/dev/null || true"
    )
    lab.exec(
        vm,
        ["systemd-run", f"--unit={RELAY_UNIT}", "--collect", "python3", "-c", RELAY,
         lab.addr(vm), str(RELAY_PORT), url.hostname or "127.0.0.1", str(url.port)],
        check=True,
        timeout=60,
    )  # fmt: skip
    return f"{lab.addr(vm)}:{RELAY_PORT}"


def stop_relay(lab: Lab, vm: str) -> None:
    lab.exec(vm, ["systemctl", "stop", RELAY_UNIT], timeout=60)


def scrape(lab: Lab, target: str, timeout: float = 30) -> tuple[float, int]:
    """One GET of http://target/metrics from the lab's namespace: (seconds, bytes)."""
    r = subprocess.run(
        ["ip", "netns", "exec", lab.ns, "curl", "-sS", "--fail", "-o", "/dev/null", "-m", str(timeout), "-w",
         "%{time_total} %{size_download}", f"http://{target}/metrics"],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if r.returncode != 0:
        raise ConnectionError(f"scrape of {target}: {r.stderr.strip()}")
    secs, size = r.stdout.split()
    return float(secs), int(size)


def wait_scrapable(lab: Lab, target: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            scrape(lab, target)
            return
        except ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
