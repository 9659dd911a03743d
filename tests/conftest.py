"""Shared test setup. Tier-specific fixtures live in tests/<tier>/conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
# The recorded data (Jepsen histories, SPDK transcript) next to the checkout, or wherever
# NODEOS_SHARED_DIR says (a CI layout that checks the project out elsewhere).
SHARED = Path(os.environ.get("NODEOS_SHARED_DIR") or PROJECT.parent / "shared")
SHARED_ABSENT = f"{SHARED} is absent: the design notes and recorded data are not here"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared/, read in place; tests that need it skip with a reason where it is absent."""
    if not SHARED.is_dir():
        pytest.skip(SHARED_ABSENT)
    return SHARED


def is_root() -> bool:
    return os.geteuid() == 0


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _time_by_module(terminalreporter)
    _skips_by_reason(terminalreporter)


def _time_by_module(terminalreporter: pytest.TerminalReporter) -> None:
    """Wall time per test module (set-up, calls and tear-down summed): where CI's budget goes."""
    spent: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if isinstance(rep, pytest.TestReport):
                module = rep.nodeid.split("::")[0]
                spent[module] = spent.get(module, 0.0) + rep.duration
    if len(spent) < 2:
        return
    terminalreporter.section(f"time by module ({sum(spent.values()) / 60:.1f} min in tests)")
    for module, secs in sorted(spent.items(), key=lambda kv: -kv[1])[:30]:
        terminalreporter.write_line(f"{secs:8.1f} s  {module}")


def _skips_by_reason(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many tests skipped and why, grouped by reason, so a skip is never silent."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    for rep in skipped:
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.section(f"{len(skipped)} skipped, by reason")
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{count:5d}  {reason}")
