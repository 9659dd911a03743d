"""Helpers for the data plane lab tests: drive nodeos.dataplane.kernel inside a storage VM
(the image carries the nodeos package) and nvme-cli on the GPU-node VMs."""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from nodeos_devtools.lab import Lab

PRELUDE = """
import json, sys
from dataclasses import asdict
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener
from nodeos.dataplane.kernel import KernelDataPlane
from nodeos.errors import NodeosError
d = KernelDataPlane()
def out(x):
    print("@@" + json.dumps(x, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o)))
try:
{body}
except NodeosError as e:
    out({{"error": type(e).__name__, **e.to_dict()}})
"""


def dp(lab: Lab, vm: str, body: str, timeout: float = 900) -> Any:
    """Run `body` (Python, with `d` a KernelDataPlane and `out(x)` to answer) inside vm."""
    code = PRELUDE.format(body="\n".join("    " + line for line in body.strip().splitlines()))
    r = lab.exec(vm, ["python3", "-"], input=code, timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("@@")]
    if r.rc != 0 or not lines:
        raise AssertionError(
            f"{vm}: python exited {r.rc}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
        )
    return json.loads(lines[-1][2:])


def spec_code(
    nqn: str,
    vol: str,
    addr: str,
    hosts: list[tuple[str, str | None]],
    *,
    pool: str = "p1",
    uuid: str,
    serial: str = "NODEOSLAB0001",
    rdma: bool = True,
    **extra: Any,
) -> str:
    listeners = [f"Listener('tcp', {addr!r}, '4420')"]
    if rdma:
        listeners.append(f"Listener('rdma', {addr!r}, '4420')")
    h = ", ".join(f"HostAccess({n!r}, {k!r})" for n, k in hosts)
    kw = "".join(f", {k}={v!r}" for k, v in extra.items())
    return (
        f"ExportSpec(nqn={nqn!r}, serial={serial!r}, pool_id={pool!r}, vol_id={vol!r}, uuid={uuid!r}, "
        f"nguid={uuid.replace('-', '')!r}, listeners=({', '.join(listeners)},), "
        f"hosts=({h}{',' if h else ''}){kw})"
    )


def discover(lab: Lab, host: str, addr: str, svcid: str, trtype: str = "tcp") -> list[str]:
    """Subsystem NQNs the host's `nvme discover` lists (empty when refused)."""
    r = lab.exec(host, ["nvme", "discover", "-t", trtype, "-a", addr, "-s", svcid, "-o", "json"], timeout=60)
    if r.rc != 0:
        return []
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return []
    return [
        e.get("subnqn", "")
        for e in doc.get("records", [])
        if e.get("subtype") != "discovery" and "discovery" not in str(e.get("subtype", ""))
    ]


def connect(lab: Lab, host: str, trtype: str, addr: str, nqn: str, *extra: str) -> tuple[int, str]:
    r = lab.exec(
        host, ["nvme", "connect", "-t", trtype, "-a", addr, "-s", "4420", "-n", nqn, *extra], timeout=180
    )
    return r.rc, r.stdout + r.stderr


def disconnect(lab: Lab, host: str, nqn: str) -> None:
    lab.exec(host, ["nvme", "disconnect", "-n", nqn], timeout=60)


def device_of(lab: Lab, host: str, nqn: str, timeout: float = 60) -> str:
    """The host's block device for the subsystem (native multipath head), once it is there."""
    script = f"""
for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  [ "$(cat $s/subsysnqn 2>/dev/null)" = {shlex.quote(nqn)} ] || continue
  for n in $s/nvme*n*; do [ -e "$n" ] && b=$(basename $n) && [ -b /dev/$b ] && echo /dev/$b && exit 0; done
done
exit 1"""
    deadline = time.monotonic() + timeout
    while True:
        r = lab.sh(host, script, check=False)
        if r.rc == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"{host}: no block device for {nqn} after {timeout} s")
        time.sleep(1)


def connected(lab: Lab, host: str, nqn: str) -> bool:
    r = lab.sh(host, f"grep -lx {shlex.quote(nqn)} /sys/class/nvme-subsystem/*/subsysnqn", check=False)
    if r.rc != 0:
        return False
    sub = r.stdout.strip().splitlines()[0].rsplit("/", 1)[0]
    st = lab.sh(host, f"cat {sub}/nvme*/state 2>/dev/null || true", check=False).stdout.split()
    return "live" in st


def wait_for(what: str, cond: Any, timeout: float = 90, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def write_random(lab: Lab, host: str, dev: str, mib: int, seek_mib: int = 0) -> str:
    """Random data to dev (direct I/O); returns its sha256."""
    r = lab.sh(
        host,
        f"""
head -c {mib}M /dev/urandom > /tmp/pattern
dd if=/tmp/pattern of={dev} bs=1M seek={seek_mib} oflag=direct conv=fsync status=none
sha256sum < /tmp/pattern | cut -d' ' -f1""",
        timeout=300,
    )
    return r.stdout.strip()


def read_sum(lab: Lab, host: str, dev: str, mib: int, skip_mib: int = 0) -> str:
    r = lab.sh(
        host,
        f"dd if={dev} bs=1M count={mib} skip={skip_mib} iflag=direct status=none | sha256sum | cut -d' ' -f1",
        timeout=300,
    )
    return r.stdout.strip()
