"""NVMe/TCP with TLS against plain text on the same volume, in the same run (issue 28's bench): not a
test, a measurement, run only when asked (NODEOS_BENCH_TLS=1), on the shared cluster3 lab, e.g.
after the host-fabric modules so the lab boots once:

    NODEOS_BENCH_TLS=1 pytest tests/lab/test_host_stas.py tests/lab/test_tls_bench.py -s

One 1-replica volume, its host `--tls allowed`, so its node exports it on 4420 (plain) and 4421
(TLS 1.3, the handshake by tlshd on both sides): h1 connects to each in turn and runs the same
fio jobs through it, alternating plain and TLS rounds so a change in the VMs' load falls on both.
Lab figures are context (TCG: the emulated CPU does the AES), never hardware figures; written
to artifacts/tls_bench.json and copied into docs/benchmarks.md by hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodeos_devtools.lab import Lab, fio
from tests.lab.dataplane_helpers import device_of
from tests.lab.node_helpers import nodeos, ok, wait_daemon

RUN = os.environ.get("NODEOS_BENCH_TLS") == "1"
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not RUN, reason="a bench: NODEOS_BENCH_TLS=1")]
# The shared lab only when it runs (tests/lab/test_storm_bench.py says why).
LAB = "cluster3" if RUN else {}
PROJECT = Path(__file__).resolve().parents[2]
STORAGE = ("s1", "s2", "s3")
SIZE_MIB = 256
RUNTIME_S = 20
ROUNDS = 2
CONNECT_OPTS = ("--keep-alive-tmo=5", "--ctrl-loss-tmo=60", "--reconnect-delay=2")
JOBS = {
    "randwrite 4k qd16": "--rw=randwrite --bs=4k --iodepth=16",
    "randread 4k qd16": "--rw=randread --bs=4k --iodepth=16",
    "read 1M qd4": "--rw=read --bs=1M --iodepth=4",
    "write 1M qd4": "--rw=write --bs=1M --iodepth=4",
}


@pytest.fixture(scope="module")
def volume(lab: Lab) -> Iterator[dict[str, Any]]:
    host = lab.spec("h1").hostnqn
    made: dict[str, Any] = {}
    for vm in STORAGE:
        wait_daemon(lab, vm)
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    try:
        added = ok(lab, "s1", "host", "add", host, "--tls", "allowed", "--tls-derivation", "compat")
        made["host"] = host
        made["vol"] = ok(lab, "s1", "volume", "create", "tlsbench", "--size", f"{SIZE_MIB}MiB")
        ok(lab, "s1", "volume", "grant", "tlsbench", "--host", host)
        yield {**made["vol"], "host": host, "tls_key": added["tls_key"]}
    finally:
        if "vol" in made:
            lab.sh("h1", f"nvme disconnect -n {made['vol']['nqn']} || true", timeout=120, check=False)
            nodeos(lab, "s1", "volume", "delete", "tlsbench", "--force")
        if "host" in made:
            nodeos(lab, "s1", "host", "remove", host)
        lab.sh("h1", "keyctl clear %:.nvme 2>/dev/null || true", check=False)
        for vm in STORAGE:
            nodeos(lab, vm, "pool", "delete", "p")


def _connect(lab: Lab, vol: dict[str, Any], tls: bool) -> str:
    node = str(vol.get("primary") or vol["replicas"][0]["node"])
    port = "4421" if tls else "4420"
    argv = ["nvme", "connect", "-t", "tcp", "-a", lab.addr(node), "-s", port, "-n", vol["nqn"], *CONNECT_OPTS]
    r = lab.exec("h1", [*argv, *(["--tls"] if tls else [])], 180)
    assert r.rc == 0, f"connect ({'TLS' if tls else 'plain'}): {r.stdout}{r.stderr}"
    transport = lab.sh("h1", "cat /sys/class/nvme/nvme*/address | grep -c 4421 || true", check=False).stdout
    assert (int(transport.strip() or 0) > 0) == tls, f"connected on the wrong port: {transport}"
    return device_of(lab, "h1", vol["nqn"], timeout=120)


def _figures(job: dict[str, Any]) -> dict[str, float]:
    side = job["write"] if job["write"]["io_bytes"] else job["read"]
    return {"MBps": side["bw_bytes"] / 1e6, "IOPS": side["iops"]}


def test_tls_against_plain_text_figures(lab: Lab, volume: dict[str, Any]) -> None:
    lab.sh("h1", "systemctl start tlshd && systemctl is-active tlshd", timeout=120)
    key = volume["tls_key"]
    lab.exec(
        "h1",
        ["sh", "-ec", 'KEY=$(cat); nvme check-tls-key --keydata="$KEY" --hostnqn=$1 --subsysnqn=$2 --insert',
         "-", volume["host"], volume["nqn"]],
        120, input=key, check=True,
    )  # fmt: skip
    # Every block written once first: reads of a thin volume's unwritten blocks cost nothing.
    dev = _connect(lab, volume, False)
    lab.sh("h1", f"dd if=/dev/urandom of={dev} bs=1M count={SIZE_MIB} oflag=direct status=none", timeout=900)
    lab.sh("h1", f"nvme disconnect -n {volume['nqn']}", timeout=120)
    results: dict[str, dict[str, list[dict[str, float]]]] = {name: {"plain": [], "tls": []} for name in JOBS}
    for rnd in range(ROUNDS):
        for tls in (False, True) if rnd % 2 == 0 else (True, False):
            mode = "tls" if tls else "plain"
            dev = _connect(lab, volume, tls)
            for name, args in JOBS.items():
                job = fio.run(
                    lab, "h1", f"tls{rnd}{mode}",
                    f"--filename={dev} {args} --direct=1 --ioengine=libaio --size={SIZE_MIB}M "
                    f"--time_based --runtime={RUNTIME_S}", timeout=RUNTIME_S + 600,
                )  # fmt: skip
                assert job["error"] == 0, f"{name} over {mode}: fio error {job['error']}"
                results[name][mode].append(_figures(job))
            lab.sh("h1", f"nvme disconnect -n {volume['nqn']}", timeout=120)
    rows = []
    for name, by_mode in results.items():
        row: dict[str, Any] = {"job": name}
        for mode, runs in by_mode.items():
            row[mode] = {k: round(sum(r[k] for r in runs) / len(runs), 1) for k in ("MBps", "IOPS")}
        row["tls_vs_plain"] = (
            round(row["tls"]["MBps"] / row["plain"]["MBps"], 2) if row["plain"]["MBps"] else None
        )
        rows.append(row)
    kernel = lab.sh("h1", "uname -r").stdout.strip()
    out = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "kernel": kernel,
        "size_mib": SIZE_MIB,
        "runtime_s": RUNTIME_S,
        "rounds": ROUNDS,
        "rows": rows,
    }
    print("\nTLS against plain text, same volume, same run (lab under TCG: context only)")
    for row in rows:
        p, t = row["plain"], row["tls"]
        ratio = row["tls_vs_plain"]
        print(f"  {row['job']:<18} plain {p['MBps']:8.1f} MB/s {p['IOPS']:8.0f} IOPS | "
              f"TLS {t['MBps']:8.1f} MB/s {t['IOPS']:8.0f} IOPS | TLS/plain {ratio}")  # fmt: skip
    art = PROJECT / "artifacts"
    art.mkdir(exist_ok=True)
    (art / "tls_bench.json").write_text(json.dumps(out, indent=2) + "\n")
