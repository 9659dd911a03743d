"""Scale of the SPDK data plane (issue 12): N volumes on one REAL nvmf_tgt, interrupt mode.

    flock /work/notes/lab.lock env NODEOS_SPDK_DIR=... .venv/bin/python bench/spdk_scale_bench.py \
        [--volumes 10000] [--block 500] [--raw 100] [--no-write]

One target (`--interrupt-mode --wait-for-rpc`, the subsystem limit set as
systemd/nodeos-spdk.service sets it, `--no-huge`, one core, nice 19), one lvstore on an AIO drive
(a sparse file), the discovery listener on. Then, block after block:
- raw (a sample of `--raw` per block): the 4 RPCs a volume needs at least (thin lvol,
  subsystem, namespace, TCP listener) on one connection, as SPDK's rpc.py sends them;
- nodeos (`--block` per block): what nodeosd's volume.create step calls for one volume:
  `create_volumes` with the export its record asks for (nodeos/node/ops.py `_volume_create_many`);
the raw sample is deleted again (not timed), so both meet the same number of subsystems.
Reported: the create rate of each and their ratio (issue 11/12 want >= 0.9), RPCs per create,
the rate per block as the count grows; then the daemon restart's re-export
(nodeos/node/service.py `reconcile`: the calls it makes, in its order) over all N volumes, then
the target's own restart (drive attached again, lvstore loaded, every export made again);
memory per volume of nvmf_tgt (VmRSS) and of a node's volume record in Python memory
(tracemalloc of N records as nodeos/node/model.new_volume makes them; the cluster map's copy is
not counted). Figures go to docs/benchmarks.md, section "SPDK scale".
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import write_section  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from benchspdk import raw_create, raw_delete, start_target, stop_target  # noqa: E402

from nodeos.dataplane.base import Listener, MadeVolume, NewVolume  # noqa: E402
from nodeos.dataplane.spdk import target_setup  # noqa: E402
from nodeos.dataplane.spdk.backend import SpdkDataPlane, lvs_name  # noqa: E402
from nodeos.dataplane.spdk.client import SpdkRpc  # noqa: E402
from nodeos.node import model  # noqa: E402

SECTION = "## SPDK scale"
GIB = 1 << 30
POOL = "p0000000000000000000000000000001"


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


LISTENER = Listener("tcp", "127.0.0.1", _free_port(), "ipv4")


def start(bin_dir: Path, work: Path, mem_mib: int, max_subsystems: int) -> subprocess.Popen[bytes]:
    args = ["-u", "--no-huge", "-s", str(mem_mib), "-m", "0x1"]
    proc = start_target(
        bin_dir, work, [*args, "--interrupt-mode", "--disable-cpumask-locks", "--wait-for-rpc"], 19
    )
    target_setup.init(str(work / "spdk.sock"), max_subsystems, wait_s=60)
    return proc


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Counter:
    """Counts the RPCs the data plane sends (wraps its client's call and call_many; the pipelined
    ones are counted, not timed)."""

    def __init__(self, dp: SpdkDataPlane) -> None:
        self.n = 0
        self.trips = 0  # round trips: a call, or a pipelined call_many
        self.by_method: dict[str, int] = {}
        self.ms: dict[str, float] = {}  # time in each method, summed
        inner = dp.rpc.call

        def counted(method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
            self.n += 1
            self.trips += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            t = time.monotonic()
            try:
                return inner(method, params, timeout)
            finally:
                self.ms[method] = self.ms.get(method, 0.0) + 1000 * (time.monotonic() - t)

        many = dp.rpc.call_many

        def counted_many(reqs: Any, window: int = 64) -> list[Any]:
            self.n += len(reqs)
            self.trips += 1
            for method, _ in reqs:
                self.by_method[method] = self.by_method.get(method, 0) + 1
            t = time.monotonic()
            try:
                return many(reqs, window)
            finally:  # a pipelined round's time, shared by its requests
                for method, _ in reqs:
                    self.ms[method] = self.ms.get(method, 0.0) + 1000 * (time.monotonic() - t) / len(reqs)

        dp.rpc.call = counted  # type: ignore[method-assign]
        dp.rpc.call_many = counted_many  # type: ignore[method-assign]


def nodeos_create(dp: SpdkDataPlane, vol: dict[str, Any]) -> dict[str, Any]:
    """nodeos/node/ops.py `_volume_create_many` for one single-replica volume, without the store."""
    spec = model.export_spec(vol, (LISTENER,), {})
    (made,) = dp.create_volumes([NewVolume(vol["pool_id"], vol["vol_id"], int(vol["size_bytes"]), spec)])
    assert isinstance(made, MadeVolume), made
    return dict(vol, size_bytes=made.volume.size_bytes, state="ready")


def reconcile(dp: SpdkDataPlane, vols: list[dict[str, Any]]) -> dict[str, Any]:
    """nodeos/node/service.py `reconcile` after a daemon restart: its data plane calls, in order."""
    have_pools = {p.pool_id for p in dp.list_pools()}
    assert POOL in have_pools
    have_vols = {v.vol_id for v in dp.list_volumes(None)}
    wanted = set()
    for v in vols:
        assert v["vol_id"] in have_vols
        wanted.add(v["nqn"])
    dp.reapply_exports([model.export_spec(v, (LISTENER,), {}) for v in vols])
    stale = [e.nqn for e in dp.list_exports() if e.nqn.startswith(model.NQN_PREFIX) and e.nqn not in wanted]
    return {"applied": len(vols), "stale": stale}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.monotonic()
    out = fn()
    return time.monotonic() - t, out


def run(
    bin_dir: Path, n: int, block: int, raw_n: int, mem_mib: int, stop_at: float | None = None
) -> dict[str, Any]:
    """`stop_at` (epoch seconds): no block is begun after it; the rest runs over what was made."""
    work = Path(mkdtemp(prefix="spdk-scale-"))
    proc = start(bin_dir, work, mem_mib, max_subsystems=max(1024, n + block + 16))
    try:
        dp = SpdkDataPlane(
            str(work / "spdk.sock"), keys_dir=work / "keys", discovery_svcid=_free_port(), transports=("tcp",)
        )
        img = work / "drive.img"
        with open(img, "wb") as fh:
            fh.truncate(256 * GIB)
        dp.create_aio_drive_for_tests("AIO0", str(img))
        dp.create_pool(POOL, ["AIO0"])
        dp.ensure_transports()  # TCP, as nodeosd makes it at start
        raw = SpdkRpc(str(work / "spdk.sock"))
        count = Counter(dp)
        rss0 = rss_kib(proc.pid)
        vols: list[dict[str, Any]] = []
        blocks: list[dict[str, Any]] = []
        t_raw = t_nodeos = 0.0
        made_raw = 0
        rpcs_create = trips_create = 0
        pool = {"name": "p", "pool_id": POOL}
        while len(vols) < n and (stop_at is None or time.time() < stop_at):
            k = min(block, n - len(vols))
            kr = min(raw_n, k)
            base = len(vols)
            lvs = lvs_name(POOL)
            dt_raw, _ = timed(lambda: [raw_create(raw, lvs, LISTENER, base + j) for j in range(kr)])  # noqa: B023
            before, trips_before = count.n, count.trips
            batch = [model.new_volume(f"v{base + j}", pool, GIB) for j in range(k)]
            dt_nodeos, made = timed(lambda: [nodeos_create(dp, v) for v in batch])  # noqa: B023
            rpcs_create += count.n - before
            trips_create += count.trips - trips_before
            vols += made
            for j in range(kr):
                raw_delete(raw, lvs, base + j)
            t_raw += dt_raw
            made_raw += kr
            t_nodeos += dt_nodeos
            blocks.append({"at": base, "raw_ms": 1000 * dt_raw / kr, "nodeos_ms": 1000 * dt_nodeos / k})
            print(json.dumps(blocks[-1]), flush=True)
        n = len(vols)
        rss1 = rss_kib(proc.pid)
        methods_create = {m: (c, count.ms[m] / c) for m, c in count.by_method.items()}
        before = count.n
        dp.rpc.close()  # the restarted daemon's first connection
        dt_rec, rec = timed(lambda: reconcile(dp, vols))
        rpcs_rec = count.n - before
        print(json.dumps({"reconcile_s": dt_rec, "reconcile_rpcs": rpcs_rec}), flush=True)
        # The target's own restart (nodeosd's data plane watch re-exports when it answers again):
        # the drive attached again, its lvstore loaded with every lvol, then everything exported
        # from nothing.
        stop_target(proc)
        dp.rpc.close()
        t0 = time.monotonic()
        proc = start(bin_dir, work, mem_mib, max_subsystems=max(1024, n + block + 16))
        # Attaching the drive loads its lvstore inside the RPC (all N lvols): the backend gives
        # an attach ATTACH_TIMEOUT_S, not the client's usual 60 s (132 s at 10,000, 2026-11-27).
        t_attach, _ = timed(lambda: dp.create_aio_drive_for_tests("AIO0", str(img)))
        print(json.dumps({"target_attach_s": t_attach}), flush=True)
        while POOL not in {p.pool_id for p in dp.list_pools()} or len(dp.list_volumes(POOL)) < n:
            assert time.monotonic() - t0 < 1800, "the lvstore did not load its lvols"
            time.sleep(1)
        dt_load = time.monotonic() - t0
        dp.ensure_transports()
        before = count.n
        dt_tgt, _ = timed(lambda: reconcile(dp, vols))
        rpcs_tgt = count.n - before
        tracemalloc.start()
        m0 = tracemalloc.take_snapshot()
        records = {v["name"]: dict(v) for v in (model.new_volume(f"m{i}", pool, GIB) for i in range(n))}
        m1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
        rec_bytes = sum(s.size_diff for s in m1.compare_to(m0, "filename"))
        del records
        return {
            "volumes": n,
            "block": block,
            "raw": made_raw,
            "raw_per_s": made_raw / t_raw,
            "nodeos_per_s": n / t_nodeos,
            "ratio": (made_raw / t_raw) and (n / t_nodeos) / (made_raw / t_raw),
            "rpcs_per_create": rpcs_create / n,
            "trips_per_create": trips_create / n,
            "methods_create": methods_create,
            "blocks": blocks,
            "reconcile_s": dt_rec,
            "reconcile_rpcs": rpcs_rec,
            "reconcile_stale": len(rec["stale"]),
            "target_attach_s": t_attach,
            "target_load_s": dt_load,
            "target_reexport_s": dt_tgt,
            "target_reexport_rpcs": rpcs_tgt,
            "tgt_rss_kib_per_volume": (rss1 - rss0) / n,
            "tgt_rss_mib": rss1 / 1024,
            "record_bytes_per_volume": rec_bytes / n,
            "load": os.getloadavg()[0],
        }
    finally:
        stop_target(proc)


def report(r: dict[str, Any], cmd: str) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    pick = [b for i, b in enumerate(r["blocks"]) if i in (0, len(r["blocks"]) // 2, len(r["blocks"]) - 1)]
    rows = "\n".join(f"| {b['at']:,} | {b['raw_ms']:.1f} ms | {b['nodeos_ms']:.1f} ms |" for b in pick)
    return f"""{SECTION}

`{cmd}` ({when}, load {r["load"]:.1f} on 2 cores; one nvmf_tgt v26.05, `--interrupt-mode --no-huge`,
one core at nice 19; one lvstore on an AIO sparse file; {r["volumes"]:,} volumes of 1 GiB, thin).
Raw = the 4 RPCs a volume needs (lvol, subsystem, namespace, listener) on one connection;
nodeos = `create_volumes` of one volume with its export, what nodeosd's volume.create step calls. Each block:
a raw sample (deleted again after the block, so both meet the same count), then {r["block"]}
nodeos creates; {r["raw"]:,} raw creates in all.

| figure | value |
|---|---|
| create rate, raw RPCs | {r["raw_per_s"]:.1f} volumes/s |
| create rate, nodeos data plane | {r["nodeos_per_s"]:.1f} volumes/s |
| nodeos / raw | **{r["ratio"]:.2f}** |
| RPCs per nodeos create | {r["rpcs_per_create"]:.1f} (raw: 4), in {r["trips_per_create"]:.1f} round trips \
(raw: 4) |
| re-export after a daemon restart, {r["volumes"]:,} volumes | {r["reconcile_s"]:.1f} s, \
{r["reconcile_rpcs"]:,} RPCs |
| target restarted: the drive's attach RPC (its lvstore loaded inside it) | {r["target_attach_s"]:.1f} s |
| ... until every lvol is listed again | {r["target_load_s"]:.1f} s |
| then everything exported again from nothing | {r["target_reexport_s"]:.1f} s, \
{r["target_reexport_rpcs"]:,} RPCs |
| nvmf_tgt memory per volume (VmRSS growth) | {r["tgt_rss_kib_per_volume"]:.1f} KiB \
(total {r["tgt_rss_mib"]:.0f} MiB) |
| nodeosd volume record (tracemalloc) | {r["record_bytes_per_volume"]:.0f} bytes per volume |

Per volume as the count grows:

| volumes there | raw | nodeos |
|---|---|---|
{rows}

RPCs of the nodeos creates by method (count, mean time; a pipelined round's time is shared by its requests):
{", ".join(f"{k} {c} ({ms:.1f} ms)" for k, (c, ms) in sorted(r["methods_create"].items()))}.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--volumes", type=int, default=10000)
    ap.add_argument("--block", type=int, default=500)
    ap.add_argument("--raw", type=int, default=100, help="raw creates per block (a sample)")
    ap.add_argument("--mem-mib", type=int, default=4096)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--stop-at", help="UTC HH:MM: begin no block of creates after it (a time slot's end)")
    a = ap.parse_args()
    d = os.environ.get("NODEOS_SPDK_DIR")
    if not d or not (Path(d) / "bin/nvmf_tgt").is_file():
        raise SystemExit("NODEOS_SPDK_DIR must name an SPDK build with bin/nvmf_tgt")
    stop = None
    if a.stop_at:
        hh, mm = (int(x) for x in a.stop_at.split(":"))
        now = datetime.now(UTC)
        stop = now.replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()
    r = run(Path(d) / "bin", a.volumes, a.block, a.raw, a.mem_mib, stop)
    print(json.dumps({k: v for k, v in r.items() if k != "blocks"}, indent=1))
    if not a.no_write:
        cmd = f"bench/spdk_scale_bench.py --volumes {r['volumes']} --block {a.block} --raw {a.raw}"
        write_section(PROJECT / "docs/benchmarks.md", SECTION, report(r, cmd))


if __name__ == "__main__":
    main()
