"""The startup-storm bench (bench/storm_bench.py) on the shared cluster3 lab: not a test, a
measurement, run only when asked (NODEOS_BENCH_STORM=1), e.g. right after the published-volume
module so the lab boots once:

    NODEOS_LAB_FULL=1 NODEOS_BENCH_STORM=1 pytest tests/lab/test_published.py tests/lab/test_storm_bench.py -s

NODEOS_BENCH_STORM_UNTIL=HH:MM (UTC) skips it when started later (it takes ~10-15 min under TCG).
Figures are printed and written to artifacts/storm_bench.json; docs/benchmarks.md is updated by hand
(or by running the bench script itself)."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodeos_devtools.lab import Lab

RUN = os.environ.get("NODEOS_BENCH_STORM") == "1"
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not RUN, reason="a bench: NODEOS_BENCH_STORM=1")]
# The shared cluster3 lab only when it runs: a skipped module counted among the shape's users would
# keep that lab up until the session ends (tests/lab/conftest.py counts modules, not skips).
LAB = "cluster3" if RUN else {}
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _in_time() -> None:
    """Before the lab fixture (autouse comes first), when the session has a deadline: past
    NODEOS_BENCH_STORM_UNTIL (HH:MM UTC) no new lab is booted; on the shared lab already up,
    10 minutes more."""
    until = os.environ.get("NODEOS_BENCH_STORM_UNTIL")
    if not until:
        return
    from tests.lab.conftest import lab_name_for

    if Lab(lab_name_for("shared.cluster3")).is_up():
        h, m = divmod(int(until[:2]) * 60 + int(until[3:]) + 10, 60)
        until = f"{h:02d}:{m:02d}"
    if datetime.now(UTC).strftime("%H:%M") > until:
        pytest.skip(f"past {until} UTC")


def test_startup_storm_figures(lab: Lab) -> None:
    sys.path.insert(0, str(PROJECT / "bench"))
    import storm_bench

    out = PROJECT / "artifacts" / "storm_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def sink(res: dict[str, Any]) -> None:
        out.write_text(json.dumps(res, indent=1))

    n = int(os.environ.get("NODEOS_BENCH_STORM_HOSTS", "200"))
    res = storm_bench.run(lab, n, ("s1", "s2", "s3"), ("h1",), sink)
    sink(res)
    print(json.dumps(res, indent=1))
    print(storm_bench.report(res, datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")))
