"""Data plane benchmark in the VM lab: fio through the NVMe/TCP export vs on the backing device.

    sudo .venv/bin/python bench/dataplane_bench.py [--runtime 15] [--size-mib 256] [--no-write]

Boots its own lab (1 storage VM with 2 drives, 1 GPU-node VM), builds a thin pool over both
drives with the kernel data plane, fills a thin volume, then runs the same fio jobs
(4 KiB random read, QD 32; 1 MiB sequential read, QD 8; libaio, direct) on the storage VM
against the volume's block device and on h1 against the exported namespace, and reports
export/local ratios. Figures go to docs/benchmarks.md, section "Data plane (lab, TCG)".
TCG emulates every guest instruction: these are lab figures, not hardware figures.
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

from benchdoc import BENCHMARKS_MD, add_no_write, write_section  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from benchspdk import target  # noqa: E402

from nodeos_devtools.lab import Lab  # noqa: E402
from tests.lab.dataplane_helpers import connect, device_of, dp, spec_code  # noqa: E402

SECTION = "## Data plane (lab, TCG)"
VOL = "b0b0b0b0b0b04b0b8b0b0b0b0b0b0b0b"
NQN = "nqn.2014-08.io.nodeos:vol:b0b0b0b0-b0b0-4b0b-8b0b-b0b0b0b0b0b0"
UUID = "b0b0b0b0-b0b0-4b0b-8b0b-b0b0b0b0b0b0"
JOBS = {
    "4k randread QD32": ["--rw=randread", "--bs=4k", "--iodepth=32"],
    "1M seqread QD8": ["--rw=read", "--bs=1M", "--iodepth=8"],
}


def fio(lab: Lab, vm: str, dev: str, args: list[str], runtime: int, size_mib: int) -> dict[str, float]:
    cmd = [
        "fio",
        "--name=b",
        f"--filename={dev}",
        "--direct=1",
        "--ioengine=libaio",
        "--time_based",
        f"--runtime={runtime}",
        "--ramp_time=2",
        f"--size={size_mib}M",
        "--output-format=json",
        *args,
    ]
    r = lab.exec(vm, cmd, timeout=runtime + 120, check=True)
    job = json.loads(r.stdout[r.stdout.index("{") :])["jobs"][0]["read"]
    return {"iops": float(job["iops"]), "mib_s": float(job["bw_bytes"]) / 2**20}


def run(runtime: int, size_mib: int) -> dict[str, Any]:
    lab = Lab("bench-dp")
    if lab.is_up():
        lab.down()
    t0 = time.monotonic()
    lab.up(storage=1, drives=2, hosts=1, drive_size_mib=max(512, size_mib))
    try:
        lab.sh("s1", "systemctl stop nodeosd.service 2>/dev/null || true")
        drives = dp(
            lab, "s1", "from nodeos.hw.nvme import NvmeCli\nout([x.device for x in NvmeCli().inventory()])"
        )
        h1 = lab.spec("h1").hostnqn
        addr = lab.addr("s1")
        spec = spec_code(NQN, VOL, addr, [(h1, None)], uuid=UUID, rdma=False)
        vol = dp(
            lab,
            "s1",
            f"""
d.create_pool('p1', {sorted(drives)!r})
v = d.create_volume('p1', {VOL!r}, {size_mib} * 1024 * 1024)
d.apply_export({spec})
out(v)""",
        )
        local_dev = vol["device"]
        # Fill the thin volume so reads hit allocated blocks on both paths.
        lab.exec(
            "s1",
            [
                "fio",
                "--name=fill",
                f"--filename={local_dev}",
                "--direct=1",
                "--ioengine=libaio",
                "--rw=write",
                "--bs=1M",
                "--iodepth=8",
                f"--size={size_mib}M",
            ],
            timeout=1800,
            check=True,
        )
        rc, text = connect(lab, "h1", "tcp", addr, NQN)
        if rc != 0:
            raise RuntimeError(text)
        remote_dev = device_of(lab, "h1", NQN)
        results: dict[str, Any] = {}
        for name, args in JOBS.items():
            local = fio(lab, "s1", local_dev, args, runtime, size_mib)
            remote = fio(lab, "h1", remote_dev, args, runtime, size_mib)
            key = "iops" if "4k" in name else "mib_s"
            results[name] = {
                "local": local,
                "export_tcp": remote,
                "metric": key,
                "ratio": remote[key] / local[key] if local[key] else None,
            }
        kernel = lab.exec("s1", ["uname", "-r"]).stdout.strip()
        return {
            "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "runtime_s": runtime,
            "size_mib": size_mib,
            "accel": lab.status().get("accel"),
            "guest_kernel": kernel,
            "results": results,
            "wall_s": round(time.monotonic() - t0),
        }
    finally:
        lab.down()


def run_spdk(runtime: int, size_mib: int) -> dict[str, Any] | None:
    """The same two jobs through a real SPDK nvmf_tgt on loopback TCP (NODEOS_SPDK_DIR), with
    spdk_nvme_perf through the export vs fio on the AIO drive's backing file; None without SPDK."""
    import os
    import re
    import socket
    import subprocess
    import tempfile

    from nodeos.dataplane.base import ExportSpec, HostAccess, Listener
    from nodeos.dataplane.spdk.backend import SpdkDataPlane

    root = os.environ.get("NODEOS_SPDK_DIR")
    if not root:
        return None
    bindir = next(
        (b for b in (Path(root) / "bin", Path(root) / "build" / "bin") if (b / "nvmf_tgt").is_file()), None
    )
    if bindir is None:
        return None
    work = Path(tempfile.mkdtemp(prefix="nodeos-spdk-bench-"))
    img = work / "drive.img"
    subprocess.run(
        ["fio", "--name=fill", f"--filename={img}", "--rw=write", "--bs=1M", f"--size={size_mib}M"],
        check=True,
        capture_output=True,
    )
    sock = work / "spdk.sock"
    with target(bindir, work, ["-u", "--no-huge", "-s", "1024", "-m", "0x1"]):
        with socket.socket() as s_:
            s_.bind(("127.0.0.1", 0))
            port = str(s_.getsockname()[1])
        dpl = SpdkDataPlane(str(sock), keys_dir=work / "keys", transports=("tcp",))
        host = "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b"
        dpl.create_pool("p1", [dpl.create_aio_drive_for_tests("AIObench", str(img))])
        dpl.create_volume("p1", "v1", (size_mib - 64) * 2**20)
        dpl.apply_export(
            ExportSpec(
                nqn=NQN,
                serial="BENCH1",
                pool_id="p1",
                vol_id="v1",
                uuid=UUID,
                nguid=UUID.replace("-", ""),
                listeners=(Listener("tcp", "127.0.0.1", port),),
                hosts=(HostAccess(host),),
            )
        )
        trid = f"trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN} hostnqn:{host}"
        out: dict[str, Any] = {}
        for name, args in JOBS.items():
            bs = "4096" if "4k" in name else "1048576"
            qd = "32" if "4k" in name else "8"
            w = "randread" if "4k" in name else "read"
            p = subprocess.run(
                [
                    str(bindir / "spdk_nvme_perf"),
                    "--no-huge",
                    "-s",
                    "512",
                    "-q",
                    qd,
                    "-o",
                    bs,
                    "-w",
                    w,
                    "-t",
                    str(runtime),
                    "-r",
                    trid,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            m = re.search(r"Total\s*:\s*([\d.]+)\s+([\d.]+)", p.stdout)
            remote = (
                {"iops": float(m.group(1)), "mib_s": float(m.group(2))} if m else {"iops": 0.0, "mib_s": 0.0}
            )
            f = subprocess.run(
                [
                    "fio",
                    "--name=b",
                    f"--filename={img}",
                    "--direct=1",
                    "--ioengine=libaio",
                    "--time_based",
                    f"--runtime={runtime}",
                    "--output-format=json",
                    *args,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            job = json.loads(f.stdout)["jobs"][0]["read"]
            local = {"iops": float(job["iops"]), "mib_s": float(job["bw_bytes"]) / 2**20}
            key = "iops" if "4k" in name else "mib_s"
            out[name] = {
                "local": local,
                "export_tcp": remote,
                "metric": key,
                "ratio": remote[key] / local[key] if local[key] else None,
            }
        dpl.close()
        return out


def render(r: dict[str, Any]) -> str:
    lines = [
        SECTION,
        "",
        f"Measured {r['when']} by `bench/dataplane_bench.py` (accel {r['accel']}, guest kernel "
        f"{r['guest_kernel']}, {r['runtime_s']} s per job, {r['size_mib']} MiB thin volume over a 2-drive "
        "LVM thin pool, nvmet TCP export to one GPU-node VM, fio libaio direct).",
        "",
        "**TCG emulates every guest instruction: these are lab figures, not hardware figures.** They",
        "show that the path works end to end and how the emulator shares its CPU, nothing about an",
        "appliance on real NVMe and NICs.",
        "",
        "| job | on the backing LV (s1) | through the export (h1, TCP) | export / local |",
        "|---|---|---|---|",
    ]
    for name, x in r["results"].items():
        k = x["metric"]
        unit = "IOPS" if k == "iops" else "MiB/s"
        ratio = f"{x['ratio']:.2f}" if x["ratio"] is not None else "n/a"
        lines.append(f"| {name} | {x['local'][k]:.0f} {unit} | {x['export_tcp'][k]:.0f} {unit} | {ratio} |")
    spdk = r.get("spdk")
    if spdk:
        lines += [
            "",
            "Through SPDK on the host (nvmf_tgt `--no-huge`, AIO drive on a file, loopback TCP,",
            "spdk_nvme_perf through the export vs fio on the file):",
            "",
            "| job | fio on the file | spdk_nvme_perf through the export | export / local |",
            "|---|---|---|---|",
        ]
        for name, x in spdk.items():
            k = x["metric"]
            unit = "IOPS" if k == "iops" else "MiB/s"
            ratio = f"{x['ratio']:.2f}" if x["ratio"] is not None else "n/a"
            lines.append(
                f"| {name} | {x['local'][k]:.0f} {unit} | {x['export_tcp'][k]:.0f} {unit} | {ratio} |"
            )
    else:
        lines += [
            "",
            "SPDK: not measured (no SPDK build named by NODEOS_SPDK_DIR on this machine); see docs/spdk.md.",
        ]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", type=int, default=15)
    ap.add_argument("--size-mib", type=int, default=256)
    add_no_write(ap)
    a = ap.parse_args()
    r = run(a.runtime, a.size_mib)
    r["spdk"] = run_spdk(a.runtime, a.size_mib)
    print(json.dumps(r, indent=2))
    if not a.no_write:
        write_section(BENCHMARKS_MD, SECTION, render(r))


if __name__ == "__main__":
    main()
