"""A file into a lab VM over the lab network, for `Lab.copy` (`nodeos-lab copy`).

Through the guest agent a file travels base64-encoded in 48 KiB JSON messages over a virtio
serial port: an update bundle (~250 MB) took 13-14 min under TCG with four VMs busy (the rolling
upgrade's lab run, 2026-12-01). Over the VM's NIC it takes seconds. The host serves the one file
from the lab's network namespace (on the bridge's own address, a port the kernel picks, a
random path), the VM fetches it with its own Python and the copy is checked by its SHA-256
before the caller renames it into place. Any failure is raised: the caller then falls back to the
guest agent (a VM cut off the network, an image without Python's urllib).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from nodeos.errors import OperationFailed

# Serves the directory's files on (ADDRESS, a free port) and prints the port once bound.
_SERVER = """
import functools, http.server, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
h.log_message = lambda *a: None
s = http.server.ThreadingHTTPServer((sys.argv[2], 0), h)
print(s.server_address[1], flush=True)
s.serve_forever()
"""
# Run in the VM: fetch URL into PATH, then print the SHA-256 of what PATH holds (read back from
# the disk: what the caller will rename into place, not what crossed the wire).
_FETCH = """
import hashlib, os, shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r, open(sys.argv[2], "wb") as f:
    shutil.copyfileobj(r, f, 1 << 20)
    f.flush()
    os.fsync(f.fileno())
h = hashlib.sha256()
with open(sys.argv[2], "rb") as f:
    while b := f.read(1 << 20):
        h.update(b)
print(h.hexdigest())
"""
READY_TIMEOUT_S = 30.0

# (vm, argv, timeout) -> (exit code, stdout, stderr): VmAccess.exec, kept small for the tests.
Run = Callable[[str, list[str], float], tuple[int, str, str]]


def sha256_of(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 20):
            h.update(b)
    return h.hexdigest()


def copy(ns: str, address: str, src: str, vm: str, dest: str, run: Run, timeout: float) -> int:
    """Put `src` at `dest` in `vm` (whole or not at all: the caller renames it into place);
    `address` is the host's on the lab network, `ns` the lab's namespace. Returns the size."""
    want = sha256_of(src)
    with tempfile.TemporaryDirectory(prefix="nodeos-lab-copy-") as d:
        name = secrets.token_hex(16)  # nobody else on the lab network guesses the path
        try:
            os.link(src, Path(d) / name)
        except OSError:  # another file system: a copy then
            shutil.copyfile(src, Path(d) / name)
        argv = ["ip", "netns", "exec", ns, sys.executable, "-c", _SERVER, d, address]
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            ready, _, _ = select.select([server.stdout], [], [], READY_TIMEOUT_S)
            line = server.stdout.readline().strip() if ready and server.stdout else ""
            if not line.isdigit():
                raise OperationFailed(f"the lab's file server did not start in {ns} (exit {server.poll()})")
            url = f"http://{address}:{line}/{name}"
            rc, out, err = run(vm, ["python3", "-c", _FETCH, url, dest], timeout)
        finally:
            server.kill()
            server.wait()
    if rc != 0:
        run(vm, ["rm", "-f", dest], 60)
        raise OperationFailed(f"{vm} could not fetch the file over the lab network: {err.strip()[-300:]}")
    if out.strip() != want:
        run(vm, ["rm", "-f", dest], 60)
        got = out.strip()[:16]
        raise OperationFailed(f"{vm} fetched a file whose SHA-256 is {got}..., not {want[:16]}...")
    return os.path.getsize(src)
