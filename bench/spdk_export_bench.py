"""A nodeos-made SPDK export against a hand-made one (issue 12): same target, same run.

    flock /work/notes/lab.lock env NODEOS_SPDK_DIR=... .venv/bin/python bench/spdk_export_bench.py \
        [--runtime 8] [--rounds 2] [--no-write]

One REAL nvmf_tgt in polling mode (as in production: its reactor on core 0, `--no-huge`), one
lvstore on a RAM drive (the export path is measured, not a disk), two thin volumes of 256 MiB in it:
- nodeos: `create_volumes` with its export (what nodeosd's volume.create step calls);
- hand: the RPCs an operator following SPDK's docs sends (bdev_lvol_create, nvmf_create_subsystem,
  nvmf_subsystem_add_ns, nvmf_subsystem_add_host, nvmf_subsystem_add_listener).
Both are written in full first (a thin lvol reads unwritten clusters as zeros without touching
its drive), then spdk_nvme_perf (core 1, loopback TCP, the granted host NQN) reads each in turn,
alternating, `--rounds` times per job: 4 KiB random QD 32 and 128 KiB sequential QD 8. Reported:
the mean of each and nodeos / hand; the spread between rounds says what noise is.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from statistics import mean
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from benchspdk import target  # noqa: E402

from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, MadeVolume, NewVolume  # noqa: E402
from nodeos.dataplane.spdk import requests as rq  # noqa: E402
from nodeos.dataplane.spdk.backend import SpdkDataPlane, lvs_name  # noqa: E402

SECTION = "## SPDK export: nodeos-made vs hand-made"
MIB = 1 << 20
HOST = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0c0c-4c0c-8c0c-0c0c0c0c0c0c"
JOBS = {
    "4 KiB random read, QD 32": ("randread", 4096, 32),
    "128 KiB sequential read, QD 8": ("read", 131072, 8),
}


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def perf(bindir: Path, trid: str, rw: str, bs: int, qd: int, runtime: int) -> dict[str, float]:
    args = ["--no-huge", "-s", "512", "-c", "0x2", "-q", str(qd), "-o", str(bs), "-w", rw, "-t", str(runtime)]
    p = subprocess.run(
        [str(bindir / "spdk_nvme_perf"), *args, "-r", trid],
        capture_output=True,
        text=True,
        check=True,
    )
    m = re.search(r"Total\s*:\s*([\d.]+)\s+([\d.]+)", p.stdout)
    if not m:
        raise RuntimeError(f"spdk_nvme_perf printed no total:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return {"iops": float(m.group(1)), "mib_s": float(m.group(2))}


def hand_made(dp: SpdkDataPlane, pool: str, port: str) -> str:
    """The export by hand, as SPDK's docs have an operator make it."""
    nqn = "nqn.2016-06.io.spdk:hand"
    lvs = lvs_name(pool)
    for method, params in (
        rq.lvol_create(lvs, "hand", 256 * MIB),
        ("nvmf_create_subsystem", {"nqn": nqn, "serial_number": "HAND0001", "allow_any_host": False}),
        rq.add_ns(nqn, f"{lvs}/hand", 1),
        ("nvmf_subsystem_add_host", {"nqn": nqn, "host": HOST}),
        rq.add_listener(nqn, Listener("tcp", "127.0.0.1", port, "ipv4")),
    ):
        dp.rpc.call(method, params)
    return nqn


def nodeos_made(dp: SpdkDataPlane, pool: str, port: str) -> str:
    nqn = "nqn.2014-08.io.nodeos:vol:c0c0c0c0-c0c0-4c0c-8c0c-c0c0c0c0c0c0"
    uuid = nqn.rsplit(":", 1)[1]
    spec = ExportSpec(
        nqn=nqn,
        serial="NODEOS0001",
        pool_id=pool,
        vol_id="nodeos",
        uuid=uuid,
        nguid=uuid.replace("-", ""),
        listeners=(Listener("tcp", "127.0.0.1", port, "ipv4"),),
        hosts=(HostAccess(HOST),),
    )
    (made,) = dp.create_volumes([NewVolume(pool, "nodeos", 256 * MIB, spec)])
    assert isinstance(made, MadeVolume), made
    return nqn


def rpc_round_trip(dp: SpdkDataPlane, n: int = 200) -> dict[str, float]:
    """What an RPC costs on this (polling) target: one at a time, and pipelined 64 deep."""
    req = ("spdk_get_version", None)
    t = time.monotonic()
    for _ in range(n):
        dp.rpc.call(*req)
    one = (time.monotonic() - t) / n
    t = time.monotonic()
    dp.rpc.call_many([req] * n)
    return {"one_ms": 1000 * one, "pipelined_ms": 1000 * (time.monotonic() - t) / n}


def run(bindir: Path, runtime: int, rounds: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="nodeos-spdk-export-"))
    with target(bindir, work, ["-u", "--no-huge", "-s", "2048", "-m", "0x1"]):
        sock = str(work / "spdk.sock")
        dp = SpdkDataPlane(sock, keys_dir=work / "keys", discovery_svcid=None, transports=("tcp",))
        pool = "p0000000000000000000000000000002"
        dp.create_pool(pool, [dp.create_malloc_drive_for_tests("Malloc0", 1024 * MIB)])
        port = _port()
        trids = {}
        for name, make in (("nodeos", nodeos_made), ("hand", hand_made)):
            nqn = make(dp, pool, port)
            trids[name] = (
                f"trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{nqn} " + f"hostnqn:{HOST}"
            )
            perf(bindir, trids[name], "write", MIB, 8, 3)  # every cluster allocated and written
        rpc = rpc_round_trip(dp)
        out: dict[str, Any] = {}
        for job, (rw, bs, qd) in JOBS.items():
            got: dict[str, list[dict[str, float]]] = {"nodeos": [], "hand": []}
            for _ in range(rounds):
                for name in ("nodeos", "hand"):
                    got[name].append(perf(bindir, trids[name], rw, bs, qd, runtime))
                    print(job, name, got[name][-1], flush=True)
            key = "iops" if bs == 4096 else "mib_s"
            out[job] = {
                "metric": key,
                "nodeos": [g[key] for g in got["nodeos"]],
                "hand": [g[key] for g in got["hand"]],
                "ratio": mean(g[key] for g in got["nodeos"]) / mean(g[key] for g in got["hand"]),
            }
        dp.close()
        return {"jobs": out, "rpc": rpc, "load": os.getloadavg()[0]}


def report(r: dict[str, Any], cmd: str, runtime: int) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    rows = []
    for job, x in r["jobs"].items():
        unit = "IOPS" if x["metric"] == "iops" else "MiB/s"
        each = ", ".join(f"{v:,.0f}" for v in x["nodeos"]), ", ".join(f"{v:,.0f}" for v in x["hand"])
        rows.append(f"| {job} | {each[0]} {unit} | {each[1]} {unit} | **{x['ratio']:.2f}** |")
    return f"""{SECTION}

`{cmd}` ({when}, load {r["load"]:.1f} on 2 cores). One nvmf_tgt v26.05 in polling mode (core 0,
`--no-huge`), an lvstore on a 1 GiB RAM drive, two thin volumes of 256 MiB written in full first;
spdk_nvme_perf on core 1 over loopback TCP, {runtime} s a run, nodeos and hand alternating. Hand =
bdev_lvol_create, nvmf_create_subsystem, add_ns, add_host, add_listener as SPDK's docs have it;
nodeos = `create_volumes` with its export. Two polling processes on two cores: the figures are this
machine's, the ratio is the point.

| job | nodeos-made (each round) | hand-made (each round) | nodeos / hand |
|---|---|---|---|
{chr(10).join(rows)}

An RPC on this polling target (`spdk_get_version`, 200 of them): {r["rpc"]["one_ms"]:.2f} ms one at a
time, {r["rpc"]["pipelined_ms"]:.3f} ms each pipelined 64 deep (SPDK's RPC server polls its socket
every 4 ms, in polling mode too).
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    add_no_write(ap)
    a = ap.parse_args()
    d = os.environ.get("NODEOS_SPDK_DIR")
    if not d or not (Path(d) / "bin/nvmf_tgt").is_file():
        raise SystemExit("NODEOS_SPDK_DIR must name an SPDK build with bin/nvmf_tgt")
    r = run(Path(d) / "bin", a.runtime, a.rounds)
    cmd = f"bench/spdk_export_bench.py --runtime {a.runtime} --rounds {a.rounds}"
    publish(SECTION, report(r, cmd, a.runtime), write=not a.no_write)


if __name__ == "__main__":
    main()
