"""Where CI's time goes: per-tier and per-module totals and the slowest tests, from pytest runs.

    sudo .venv/bin/python bench/ci_budget.py --run          # runs the tiers below, then writes
    sudo .venv/bin/python bench/ci_budget.py JUNIT.xml...   # summarises existing junit files

`--run` runs the tiers `bash tests/run.sh` runs, in two pytest invocations one after the other
(the fast tiers, then the lab tiers; not in run.sh's two overlapping phases, so each tier's own
time shows) each with `--junitxml`, and records their wall times. A test's time in the junit file
is its set-up + call + tear-down, so a module's lab boot shows in its first test (a shared lab's
boot in the first test of the first module using it). Figures go to docs/benchmarks.md,
section "CI (tests/run.sh)", with the host's load: the CI machine is the same 2-core kind, often
shared with other labs, and every lab figure scales with that load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)

SECTION = "## CI (tests/run.sh)"
TIERS = {"fast": ["-m", "not lab and not labimage"], "lab": ["-m", "lab or labimage", "tests/lab"]}


def run_tiers(out_dir: Path) -> dict[str, float]:
    walls: dict[str, float] = {}
    for tier, args in TIERS.items():
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
             f"--junitxml={out_dir / f'{tier}.xml'}"],
            cwd=PROJECT, check=False,
        )  # fmt: skip
        walls[tier] = time.monotonic() - t0
    return walls


def read_junit(paths: list[Path]) -> list[tuple[str, str, float, str]]:
    """(module, test, seconds, outcome) for every test case."""
    rows = []
    for p in paths:
        for tc in ET.parse(p).getroot().iter("testcase"):
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if tc.find(tag) is not None:
                    outcome = tag
            rows.append((tc.get("classname", ""), tc.get("name", ""), float(tc.get("time", 0)), outcome))
    return rows


def render(rows: list[tuple[str, str, float, str]], walls: dict[str, float], note: str) -> str:
    per_module: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for mod, _, t, _ in rows:
        per_module[mod] += t
    for *_, outcome in rows:
        counts[outcome] += 1
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        SECTION,
        "",
        "`sudo .venv/bin/python bench/ci_budget.py --run` (the tiers of `bash tests/run.sh`, two pytest",
        f"runs), measured {when}, load average at the end {os.getloadavg()[0]:.1f} (2-core, TCG only).",
        note,
        "",
        f"Tests: {', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}.",
        "",
    ]
    if walls:
        lines += ["| pytest run | wall time |", "|---|---|"]
        lines += [f"| {k} (`{' '.join(TIERS[k])}`) | {v / 60:.1f} min |" for k, v in walls.items()]
        lines += [f"| total | {sum(walls.values()) / 60:.1f} min |", ""]
    lines += ["Slowest modules (sum of their tests, set-up and tear-down included):", ""]
    lines += ["| module | seconds |", "|---|---|"]
    for mod, t in sorted(per_module.items(), key=lambda x: -x[1])[:12]:
        lines.append(f"| {mod} | {t:.0f} |")
    lines += ["", "Slowest tests:", "", "| test | seconds | outcome |", "|---|---|---|"]
    for mod, name, t, outcome in sorted(rows, key=lambda r: -r[2])[:15]:
        lines.append(f"| {mod}::{name} | {t:.0f} | {outcome} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("junit", nargs="*", type=Path)
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--out", type=Path, default=PROJECT / "artifacts" / "ci-budget")
    ap.add_argument("--note", default="")
    ap.add_argument("--wall", action="append", default=[], metavar="TIER=SECONDS",
                    help="Wall time of a tier run elsewhere (with existing junit files).")  # fmt: skip
    add_no_write(ap)
    a = ap.parse_args()
    walls = {k: float(v) for k, v in (w.split("=", 1) for w in a.wall)}
    paths = list(a.junit)
    if a.run:
        a.out.mkdir(parents=True, exist_ok=True)
        walls = run_tiers(a.out)
        paths = [a.out / f"{t}.xml" for t in TIERS]
    text = render(read_junit([p for p in paths if p.exists()]), walls, a.note)
    publish(SECTION, text, write=not a.no_write)


if __name__ == "__main__":
    main()
