"""Volume create through the cluster on a REAL nvmf_tgt, against the raw RPCs (issue 11).

    flock /work/notes/lab.lock env NODEOS_SPDK_DIR=... .venv/bin/python bench/cluster_create_bench.py \
        [--volumes 200] [--block 25] [--clients 8] [--no-write]

One nvmf_tgt (interrupt mode, one core, nice 19, as bench/spdk_scale_bench.py runs it) whose JSON
config attaches an AIO drive (a sparse file); one nodeosd on it (`--dataplane spdk`), a cluster of
one (`cluster init`), a pool on the drive. Then, block after block, alternating on the same target:
- raw: the 4 RPCs a volume needs at least (thin lvol, subsystem, namespace, TCP listener), one
  volume after the other on one connection, as SPDK's rpc.py sends them (deleted again, not timed);
- through the cluster, one client: `volume.create` on the daemon's API, one after the other: each
  returns once the volume is ready (placed by a Raft commit, made and exported by the node's agent,
  reported back through Raft), what `nodeos volume create` waits for;
- through the cluster, `--clients` at once, each making its share of the block.
Reported: the rate of each and the ratios to raw (issue 11 asks >= 0.9 for creates through the
cluster). Figures go to docs/benchmarks.md, section "Volume create through the cluster (SPDK)".
Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from benchspdk import raw_create, raw_delete, start_target, stop_target  # noqa: E402

from nodeos.dataplane.base import Listener  # noqa: E402
from nodeos.dataplane.spdk.client import SpdkRpc  # noqa: E402
from nodeos.dataplane.spdk.names import lvs_name  # noqa: E402
from nodeos.rpc.client import Client  # noqa: E402

SECTION = "## Volume create through the cluster (SPDK)"
GIB = 1 << 30
STORAGE_ADDRESS = "127.0.0.2"


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def start_nodeosd(work: Path, spdk_sock: Path) -> subprocess.Popen[bytes]:
    api = work / "api.sock"
    cmd = [
        sys.executable, "-m", "nodeos.daemon.main",
        "--state-dir", str(work / "state"),
        "--api-socket", str(api),
        "--peer-listen", f"127.0.0.1:{free_port()}",
        "--dataplane", "spdk",
        "--spdk-socket", str(spdk_sock),
        "--node-name", "n1",
        "--storage-address", STORAGE_ADDRESS,
        "--metrics-listen", f"127.0.0.1:{free_port()}",
    ]  # fmt: skip
    drives = [{"id": "AIO0", "path": "AIO0", "size_bytes": 256 * GIB}]
    env = dict(os.environ, NODEOS_TEST_DRIVES=json.dumps(drives))
    with open(work / "nodeosd.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            Client(str(api), timeout_s=2).call("daemon.ping")
            return proc
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = (work / "nodeosd.log").read_text()[-2000:]
                raise SystemExit(f"nodeosd did not answer:\n{tail}") from None
            time.sleep(0.2)


def creates(api: str, names: list[str], clients: int) -> float:
    """Seconds to create `names` through the API with `clients` at once (each waits for ready)."""
    errors: list[BaseException] = []
    shares = [names[k::clients] for k in range(clients)]

    def worker(share: list[str]) -> None:
        c = Client(api, timeout_s=300)
        try:
            for name in share:
                c.call("volume.create", {"name": name, "size": GIB})
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in shares if s]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - t0


def run(bin_dir: Path, n: int, block: int, clients: int) -> dict[str, Any]:
    work = Path(mkdtemp(prefix="cluster-create-"))
    img = work / "drive.img"
    with open(img, "wb") as fh:
        fh.truncate(256 * GIB)
    cfg = work / "tgt.json"
    aio = {"name": "AIO0", "filename": str(img), "block_size": 4096}
    bdev = [{"method": "bdev_aio_create", "params": aio}, {"method": "bdev_wait_for_examine"}]
    cfg.write_text(json.dumps({"subsystems": [{"subsystem": "bdev", "config": bdev}]}))
    args = ["-u", "--no-huge", "-s", "1024", "-m", "0x1", "--interrupt-mode", "--disable-cpumask-locks"]
    tgt = start_target(bin_dir, work, [*args, "--json", str(cfg)], 19)
    daemon = None
    try:
        daemon = start_nodeosd(work, work / "spdk.sock")
        api = str(work / "api.sock")
        c = Client(api, timeout_s=120)
        c.call("cluster.init", {"node_id": 1})
        c.call("pool.create", {"name": "p1", "drives": ["AIO0"], "node": "n1"})
        pool = next(p for p in _rows(c.call("pool.list"), "pools") if p["name"] == "p1")
        lvs = lvs_name(pool["pool_id"])
        listener = Listener("tcp", STORAGE_ADDRESS, free_port(), "ipv4")
        raw = SpdkRpc(str(work / "spdk.sock"))
        t_raw = 0.0
        made = made_raw = 0
        blocks: list[dict[str, float]] = []
        while made < n:
            k = min(block, n - made)
            t0 = time.monotonic()
            for j in range(k):
                raw_create(raw, lvs, listener, made_raw + j)
            dt_raw = time.monotonic() - t0
            for j in range(k):
                raw_delete(raw, lvs, made_raw + j)
            made_raw += k
            half = k // 2
            dt_one = creates(api, [f"v{made + j}" for j in range(half)], 1)
            dt_many = creates(api, [f"v{made + j}" for j in range(half, k)], clients)
            t_raw += dt_raw
            blocks.append({
                "at": made,
                "raw_ms": 1000 * dt_raw / k,
                "one_ms": 1000 * dt_one / half,
                "many_ms": 1000 * dt_many / (k - half),
            })  # fmt: skip
            print(json.dumps(blocks[-1]), flush=True)
            made += k
        ready = sum(1 for v in _rows(c.call("volume.list"), "volumes") if v.get("state") == "ready")
        return {
            "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "host": f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs",
            "volumes": made,
            "ready": ready,
            "block": block,
            "clients": clients,
            "raw_per_s": made_raw / t_raw,
            "one_per_s": _rate(blocks, "one"),
            "many_per_s": _rate(blocks, "many"),
        }
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
        stop_target(tgt)
        shutil.rmtree(work, ignore_errors=True)


def _rows(out: Any, key: str) -> list[dict[str, Any]]:
    return list(out[key] if isinstance(out, dict) else out)


def _rate(blocks: list[dict[str, float]], key: str) -> float:
    ms = [b[f"{key}_ms"] for b in blocks]
    return 1000 * len(ms) / sum(ms)


def render(r: dict[str, Any]) -> str:
    raw = r["raw_per_s"]
    return f"""{SECTION}

`flock /work/notes/lab.lock env NODEOS_SPDK_DIR=/work/spdk-build/dist .venv/bin/python
bench/cluster_create_bench.py --volumes {r["volumes"]} --block {r["block"]} --clients {r["clients"]}`
({r["when"]}, {r["host"]}). One nvmf_tgt v26.05 (interrupt mode, one core, nice 19), an AIO drive
on a sparse file, one nodeosd on it (a cluster of one: every create is placed by a Raft commit and
reported ready by another), thin volumes of 1 GiB; raw and nodeos creates alternate in blocks of
{r["block"]} on the same target. {r["ready"]} volumes ready at the end.

| creates | volumes/s | ms a volume | against raw |
|---|---|---|---|
| raw RPCs (4 a volume, one after the other) | {raw:.1f} | {1000 / raw:.1f} | 1.00 |
| through the cluster, 1 client (`volume.create`, returns once ready) | {r["one_per_s"]:.1f} | \
{1000 / r["one_per_s"]:.1f} | {r["one_per_s"] / raw:.2f} |
| through the cluster, {r["clients"]} clients at once | {r["many_per_s"]:.1f} | \
{1000 / r["many_per_s"]:.1f} | {r["many_per_s"] / raw:.2f} |
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--volumes", type=int, default=200)
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--clients", type=int, default=8)
    add_no_write(ap)
    a = ap.parse_args()
    spdk = os.environ.get("NODEOS_SPDK_DIR")
    if not spdk or not (Path(spdk) / "bin" / "nvmf_tgt").is_file():
        raise SystemExit("set NODEOS_SPDK_DIR to an SPDK build (../shared/spdk/BUILD.md)")
    r = run(Path(spdk) / "bin", a.volumes, a.block, a.clients)
    publish(SECTION, render(r), write=not a.no_write)


if __name__ == "__main__":
    main()
