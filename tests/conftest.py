"""Shared test setup. Tier-specific fixtures live in tests/<tier>/conftest.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: it is a wall-clock assertion, and on a loaded machine (CI beside a
# lab's VMs) a 200 ms example failed a codec round trip that had nothing wrong (timings go in
# bench/, never in tests).
settings.register_profile("nodeos", deadline=None)
settings.load_profile("nodeos")

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


# A CI log may be cut (a run past CI's limit shows only its head): each failure and each lab
# module's time are said as they happen, one line each, not only in the summary at the end.
_STARTED = time.monotonic()
_module_times: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::")[0]
    _module_times[module] = _module_times.get(module, 0.0) + report.duration
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        why = crash.message if crash is not None else report.longreprtext.strip()[-400:]
        why = " ".join(why.split())[:600]
        print(
            f"\n[{(time.monotonic() - _STARTED) / 60:.1f} min] FAILED ({report.when}) {report.nodeid}: {why}",
            flush=True,
        )


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    module = nodeid.split("::")[0]
    if "/lab/" in module and _module_times.get(module, 0.0) > 60:
        # One line per lab test that finished, with its module's time so far: where the lab's time goes.
        print(f" [{module.rsplit('/', 1)[-1]} {_module_times[module]:.0f} s]", end="", flush=True)


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
