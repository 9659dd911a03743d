"""`nodeos node show` of this node has its running version and its A/B slots, read from the
updater; on a machine without slots (this one) it says so instead of inventing them."""

from __future__ import annotations

from pathlib import Path

import pytest

import nodeos
from tests.process.conftest import Daemon

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]


def test_node_show_has_the_version_and_says_there_are_no_slots(daemon: Daemon) -> None:
    if Path("/etc/rauc/system.conf").exists():
        pytest.skip("this machine has RAUC slots")
    daemon.start()
    shown = daemon.cli_json("node", "show", "n1")
    assert shown["version"] == nodeos.__version__
    assert shown["slots"] is None
    assert "no A/B slots on this machine" in shown["slots_note"]
    human = daemon.cli("node", "show", "n1", check=True)
    assert f"version    {nodeos.__version__}" in human.stdout
    assert "slots      - (no A/B slots on this machine" in human.stdout
