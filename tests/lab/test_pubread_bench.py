"""The published-volume read bench (bench/pubread_bench.py) on the shared cluster3 lab: not a
test, a measurement, run only when asked (NODEOS_BENCH_PUBREAD=1), e.g. right after the
published-volume module so the lab boots once:

    NODEOS_LAB_FULL=1 NODEOS_BENCH_PUBREAD=1 pytest tests/lab/test_published.py \
        tests/lab/test_pubread_bench.py -s

NODEOS_BENCH_PUBREAD_END=HH:MM (UTC), the session's end: the bench takes ~6 min under TCG
with one round (a 32 MiB volume written and published to 3 nodes, then 4 configurations),
~3 min more per round: two rounds when 11 minutes are left, one when 7 are, else it is skipped
(before its lab is booted).
Figures are printed and written to artifacts/pubread_bench.json and .md; docs/benchmarks.md is
updated by hand (or by running the bench script itself)."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodeos_devtools.lab import Lab

RUN = os.environ.get("NODEOS_BENCH_PUBREAD") == "1"
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not RUN, reason="a bench: NODEOS_BENCH_PUBREAD=1")]
# The shared cluster3 lab only when it runs: a skipped module counted among the shape's users would
# keep that lab up until the session ends (tests/lab/conftest.py counts modules, not skips).
LAB = "cluster3" if RUN else {}
PROJECT = Path(__file__).resolve().parents[2]


def _minutes_left() -> float | None:
    end = os.environ.get("NODEOS_BENCH_PUBREAD_END")
    if not end:
        return None
    now = datetime.now(UTC)
    at = now.replace(hour=int(end[:2]), minute=int(end[3:]), second=0, microsecond=0)
    return (at - now).total_seconds() / 60


@pytest.fixture(scope="module", autouse=True)
def _in_time() -> None:
    """Before the lab fixture (autouse comes first): fewer than 7 minutes before
    NODEOS_BENCH_PUBREAD_END it does not start (no lab is booted for it either)."""
    left = _minutes_left()
    if left is not None and left < 7:
        pytest.skip(f"{left:.1f} min before the session's end ({os.environ['NODEOS_BENCH_PUBREAD_END']} UTC)")


def test_published_read_throughput_with_1_2_and_3_replicas(lab: Lab) -> None:
    sys.path.insert(0, str(PROJECT / "bench"))
    import pubread_bench

    out = PROJECT / "artifacts" / "pubread_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def sink(res: dict[str, Any]) -> None:
        out.write_text(json.dumps(res, indent=1))

    seconds = float(os.environ.get("NODEOS_BENCH_PUBREAD_SECONDS", "8"))
    left = _minutes_left()
    rounds = int(os.environ.get("NODEOS_BENCH_PUBREAD_ROUNDS", "2"))
    if left is not None and left < 11:
        rounds = 1
    res = pubread_bench.run(lab, ("s1", "s2", "s3"), 32, seconds, rounds, sink)
    sink(res)
    text = pubread_bench.report(res, datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    out.with_suffix(".md").write_text(text)
    print(json.dumps(res, indent=1))
    print(text)
