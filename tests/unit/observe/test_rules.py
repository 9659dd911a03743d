"""The shipped alert rules pass promtool, fire in promtool's rule tests, and name only metrics
the exporter really exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .snapshots import full, sample_names

HERE = Path(__file__).parent
RULES = HERE.parents[2] / "nodeos" / "observe" / "prometheus" / "nodeos-rules.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian package prometheus) not installed"
)
METRIC = re.compile(r"\bnodeos_[a-z0-9_]*\b")


@needs_promtool
def test_promtool_check_rules() -> None:
    r = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
def test_every_alert_fires_on_its_failure_in_promtool_rule_tests() -> None:
    r = subprocess.run(
        [str(PROMTOOL), "test", "rules", "rules_test.yml"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_rules_name_only_exported_metrics_and_cover_the_issue() -> None:
    # Each rule is `- alert: Name` followed by a one-line `expr:` (kept so for this check).
    text = RULES.read_text()
    rules = re.findall(r"- alert: (\w+)\n\s+expr: (.+)\n", text)
    assert len(rules) == text.count("- alert:")
    exported = sample_names(full())
    for alert, expr in rules:
        names = set(METRIC.findall(expr))
        assert names <= exported, (alert, names - exported)
    alerts = {a for a, _ in rules}
    wanted = {
        "NodeosNodeDown",
        "NodeosRaftNoLeader",
        "NodeosVolumeDegraded",
        "NodeosRebuildStalled",
        "NodeosDriveFailing",
        "NodeosDriveWearingOut",
        "NodeosPoolNearlyFull",
        "NodeosPfcPauseStorm",
        "NodeosNetworkDrift",
        "NodeosDataplaneDown",
        "NodeosDataplaneCallStuck",
        "NodeosMapNonconformingCommand",
    }
    assert wanted <= alerts
