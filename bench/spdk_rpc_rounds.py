"""One JSON-RPC round to a polling SPDK target: SPDK's nvmf_tgt (its RPC socket polled every
4 ms) against nodeos-tgt (native/nodeos-tgt: the same target, its socket polled every
--rpc-poll-us), same build, same run, alternated.

    NODEOS_SPDK_DIR=/work/spdk-build/dist .venv/bin/python bench/spdk_rpc_rounds.py \
        [--rounds 3] [--calls 300] [--nice 10]

Each target in polling mode on core 0 (`-u --no-huge -s 1024 -m 0x1`, as the SPDK tests run it),
one at a time; `--calls` spdk_get_version calls one after the other on one connection (what each
step of a one-step snapshot waits for: freeze, legs, read-and-thaw are each one such round).
Printed: p50 / p90 / p99 / max per target and round. Figures, never pass/fail.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))

from benchspdk import target  # noqa: E402  (bench/ is on sys.path when a bench script runs)

from nodeos.dataplane.spdk.client import SpdkRpc  # noqa: E402
from nodeos_devtools import native_tgt  # noqa: E402

ARGS = ["-u", "--no-huge", "-s", "1024", "-m", "0x1", "--disable-cpumask-locks"]


def rounds_ms(sock: Path, calls: int) -> list[float]:
    rpc = SpdkRpc(str(sock))
    try:
        rpc.call("spdk_get_version")  # the connection made, outside the figure
        out = []
        for _ in range(calls):
            t = time.perf_counter()
            rpc.call("spdk_get_version")
            out.append((time.perf_counter() - t) * 1000)
        return sorted(out)
    finally:
        rpc.close()


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--nice", type=int, default=10)
    a = ap.parse_args()
    d = os.environ.get("NODEOS_SPDK_DIR")
    if not d:
        print("NODEOS_SPDK_DIR is not set (an SPDK build with bin/nvmf_tgt: docs/spdk.md)", file=sys.stderr)
        return 2
    bin_dir = Path(d) / "bin"
    tree = native_tgt.spdk_tree(bin_dir / "nvmf_tgt")
    if tree is None:
        print(f"{bin_dir}/nvmf_tgt is not in an SPDK tree: nodeos-tgt cannot be built", file=sys.stderr)
        return 2
    ours = native_tgt.build(tree)
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f}; {a.calls} calls per round, targets at nice {a.nice}")
    for r in range(a.rounds):
        for name, binary in (("nvmf_tgt", bin_dir / "nvmf_tgt"), ("nodeos-tgt", ours)):
            with tempfile.TemporaryDirectory() as work, target(bin_dir, Path(work), ARGS, a.nice, binary):
                ms = rounds_ms(Path(work) / "spdk.sock", a.calls)
            print(
                f"round {r + 1} {name:10s} p50 {pct(ms, 0.5):6.2f}  p90 {pct(ms, 0.9):6.2f}  "
                f"p99 {pct(ms, 0.99):6.2f}  max {ms[-1]:6.2f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
