"""The seeded fault soak (tests/tooling/nodeos_devtools/lab/soak.py, `nodeos-lab soak`) on the shared cluster3
lab: a
short seed, every violation listed in the failure.

CI runs seed 223 for its first 7 actions with the cheap faults only (a network cut, nodeosd
killed): its first steps create a 1-replica and a 3-replica volume, write a mark on the first,
start fio with verify on the second, cut a storage VM off (a node of the 3-replica volume, as
every node is), then the closing actions: heal it, check fio, read the mark back. A power-off or a pulled
drive costs a VM's boot (minutes under TCG); they run with NODEOS_LAB_FULL=1, as does a longer
run. The soak's own end (everything healthy, deleted, no leftover on any node, deep) is the
module's cleanliness; the shared lab's check after it must find the lab as it was.

The report is printed and appended to artifacts/lab/soak.txt (figures, never asserted)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nodeos_devtools.lab import Lab
from nodeos_devtools.lab.soak import Soak
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

pytestmark = pytest.mark.lab
LAB = "cluster3"
SEED = 223  # fio on a 3-replica volume, a cut, a mark read back after it: within its first 10 steps
ARTIFACTS = Path(os.environ.get("NODEOS_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts"))


def _record(report_text: str, doc: dict[str, object]) -> None:
    print(f"\n{report_text}")
    out = ARTIFACTS / "lab" / "soak.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC\n{report_text}\n{json.dumps(doc)}\n\n"
        )


@pytest.mark.parametrize(
    "minutes, steps, faults",
    [
        # CI's: the seed's first 7 actions (the 7th cuts s3 off under fio), then the closing ones;
        # counted, not timed: 3 minutes drew the cut on one run and not on the next (creates of
        # 56 s, then 84 s). Minutes only bound it. First passed 2026-11-29: 10 actions, 11.5 min.
        pytest.param(30, 7, ("cut", "kill")),
        pytest.param(
            20,
            None,
            ("power", "cut", "kill", "drive"),
            marks=pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL),
        ),
    ],
    ids=["ci", "full"],
)
def test_a_short_seed_soaks_with_no_violation_and_leaves_nothing_behind(
    lab: Lab, minutes: int, steps: int | None, faults: tuple[str, ...]
) -> None:
    report = Soak(lab, SEED, minutes=minutes, steps=steps, faults=faults).run()
    _record(report.render(), report.to_json())
    assert report.ok, report.render()
    assert report.counts.get("fio_check", {}).get("ok"), "no fio job ran to its verify: " + report.render()
    assert any(report.counts.get(f, {}).get("ok") for f in faults), (
        "no fault was injected: " + report.render()
    )
