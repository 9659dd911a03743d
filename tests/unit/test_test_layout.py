"""The test layout itself: absent recorded data is announced, and every skip is counted and explained."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


def test_run_sh_says_loudly_when_the_recorded_data_is_absent() -> None:
    env = {**os.environ, "NODEOS_SHARED_DIR": "/nonexistent/shared"}
    r = subprocess.run(
        ["bash", "tests/run.sh", "--collect-only", "-q", "tests/unit/test_errors.py"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING: /nonexistent/shared is absent" in r.stderr and "SKIP" in r.stderr


def test_summary_counts_the_skips_and_names_the_reason() -> None:
    env = {**os.environ, "NODEOS_SHARED_DIR": "/nonexistent/shared"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/unit/devtools/test_lincheck.py",
            "-k",
            "agrees_with_every",
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 skipped, by reason" in r.stdout, r.stdout
    assert "    2  /nonexistent/shared is absent" in r.stdout, r.stdout
