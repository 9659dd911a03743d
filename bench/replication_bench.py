"""Replicated volume write throughput in the VM lab: 1, 2 and 3 replicas, the same run.

    sudo .venv/bin/python bench/replication_bench.py [--runtime 20] [--size-mib 128] [--no-write]

Boots its own lab (3 storage VMs formed into one cluster, racks a/b/c, one GPU-node VM), makes a
pool on every node and, through the `nodeos` console, a volume with 1, 2 and 3 replicas (spread
by rack). The GPU node connects with `nvme connect-all` and native multipath and runs the same
fio job on each (1 MiB sequential writes, QD 8, libaio, direct; then 4 KiB random writes, QD 16)
and the figures are reported as ratios over the 1-replica volume. Written to docs/benchmarks.md,
section "Replicated volumes (lab, TCG)". TCG emulates every guest instruction and the four VMs
share two host cores: these are lab figures, not hardware figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))  # nodeos_devtools, without the dev install too

from benchdoc import BENCHMARKS_MD, add_no_write, write_section  # noqa: E402

from nodeos_devtools.lab import Lab  # noqa: E402
from tests.lab.node_helpers import ok, wait_daemon  # noqa: E402

SECTION = "## Replicated volumes (lab, TCG)"
JOBS = {
    "1M seqwrite QD8": ["--rw=write", "--bs=1M", "--iodepth=8"],
    "4k randwrite QD16": ["--rw=randwrite", "--bs=4k", "--iodepth=16"],
}
CONNECT = "--keep-alive-tmo=5 --ctrl-loss-tmo=30 --reconnect-delay=2"


def head_device(lab: Lab, nqn: str, paths: int, timeout: float = 300) -> str:
    script = f"""
for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  [ "$(cat $s/subsysnqn)" = "{nqn}" ] || continue
  n=$(ls -d $s/nvme[0-9]* 2>/dev/null | grep -c c)
  echo "$n $(ls -d $s/nvme*n1 2>/dev/null | head -1 | xargs -r basename)"
done"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = lab.sh("h1", script).stdout.split()
        if len(out) == 2 and int(out[0]) >= paths:
            return "/dev/" + out[1]
        time.sleep(2)
    raise RuntimeError(f"no multipath device with {paths} paths for {nqn}")


def fio(lab: Lab, dev: str, args: list[str], runtime: int, size_mib: int) -> dict[str, float]:
    cmd = [
        "fio", "--name=b", f"--filename={dev}", "--direct=1", "--ioengine=libaio", "--time_based",
        f"--runtime={runtime}", "--ramp_time=2", f"--size={size_mib}M", "--output-format=json", *args,
    ]  # fmt: skip
    r = lab.exec("h1", cmd, timeout=runtime + 180, check=True)
    job = json.loads(r.stdout[r.stdout.index("{") :])["jobs"][0]["write"]
    return {"iops": float(job["iops"]), "mib_s": float(job["bw_bytes"]) / 2**20}


def run(runtime: int, size_mib: int) -> dict[str, Any]:
    lab = Lab("bench-rep")
    if lab.is_up():
        lab.down()
    t0 = time.monotonic()
    lab.up(storage=3, drives=1, hosts=1, drive_size_mib=max(1024, 4 * size_mib), cluster=True)
    try:
        for vm in lab.storage_vms:
            wait_daemon(lab, vm)
            ok(lab, vm, "pool", "create", "p", "--drives", "all")
        host = lab.spec("h1").hostnqn
        ok(lab, "s1", "host", "add", host)
        out: dict[str, Any] = {"boot_s": round(time.monotonic() - t0), "results": {}}
        for n in (1, 2, 3):
            name = f"b{n}"
            vol = ok(lab, "s1", "volume", "create", name, "--size", f"{size_mib}MiB", "--replicas", str(n),
                     "--spread", "rack", timeout=900)  # fmt: skip
            ok(lab, "s1", "volume", "grant", name, "--host", host)
            lab.sh(
                "h1", f"nvme connect-all -t tcp -a {lab.addr(vol['primary'])} -s 8009 {CONNECT}", timeout=300
            )
            dev = head_device(lab, vol["nqn"], n)
            out["results"][n] = {job: fio(lab, dev, args, runtime, size_mib) for job, args in JOBS.items()}
            lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
            ok(lab, "s1", "volume", "revoke", name, "--host", host)
            ok(lab, "s1", "volume", "delete", name, timeout=900)
        return out
    finally:
        lab.down()


def render(r: dict[str, Any], runtime: int, size_mib: int) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    base = r["results"][1]
    lines = [
        SECTION,
        "",
        f"Measured {when} by `bench/replication_bench.py --runtime {runtime} --size-mib {size_mib}`: "
        "3 storage VMs (racks a, b, c) and a GPU-node VM under TCG on a 2-core host (lab boot "
        f"{r['boot_s']} s). Each volume's primary mirrors every write to its other replicas over "
        "NVMe/TCP (md raid1) before acknowledging. Ratios over the 1-replica volume, same run.",
        "",
        "| job | 1 replica | 2 replicas | 3 replicas |",
        "|---|---|---|---|",
    ]
    for job in JOBS:
        cells = []
        for n in (1, 2, 3):
            x = r["results"][n][job]
            ratio = x["mib_s"] / base[job]["mib_s"] if base[job]["mib_s"] else 0.0
            cells.append(f"{x['mib_s']:.1f} MiB/s, {x['iops']:.0f} IOPS (x{ratio:.2f})")
        lines.append(f"| {job} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", type=int, default=20)
    ap.add_argument("--size-mib", type=int, default=128)
    add_no_write(ap)
    a = ap.parse_args()
    r = run(a.runtime, a.size_mib)
    print(json.dumps(r, indent=2))
    if not a.no_write:
        write_section(BENCHMARKS_MD, SECTION, render(r, a.runtime, a.size_mib))


if __name__ == "__main__":
    main()
