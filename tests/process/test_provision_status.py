"""An invalid configuration on the console and in `nodeos status`: the boot unit's command exits
2 naming the field and what is allowed, writes nothing, and the daemon's status says the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process.conftest import Daemon
from tests.unit.provision.helpers import VALID_TOML

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]

NODEOS = str(Path(sys.executable).parent / "nodeos")


def _apply(tmp: Path, state_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            NODEOS,
            "provision",
            "apply",
            "--phase",
            "system",
            "--root",
            str(tmp / "root"),
            "--state-dir",
            str(state_dir),
            "--partition-dir",
            str(tmp / "cfg"),
            "--credentials-dir",
            str(tmp / "nocreds"),
            "--cmdline-file",
            str(tmp / "cmdline"),
            "--runtime-dir",
            str(tmp / "run"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_invalid_configuration_is_said_on_the_console_and_in_status(
    daemon: Daemon, tmp_path: Path
) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cmdline").write_text("root=/dev/sda2 nodeos.hostname=fromcmdline\n")
    bad = VALID_TOML.replace('"198.51.100.11/24"', '"198.51.100.300/24"')
    (tmp_path / "cfg" / "nodeos.toml").write_text(bad)
    field = "network.interfaces[1].addresses[0]"

    r = _apply(tmp_path, daemon.state_dir)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"(field: {field})" in r.stderr and "allowed: an address with prefix length" in r.stderr
    assert list((tmp_path / "root").iterdir()) == [], "nothing applied"
    r = _apply(tmp_path, daemon.state_dir, "--json")
    assert r.returncode == 2
    err = json.loads(r.stdout)["error"]
    assert err["code"] == "bad_input" and err["field"] == field and err["allowed"]

    daemon.start()
    st = daemon.cli_json("status")
    assert st["provision"]["result"] == "invalid"
    assert st["provision"]["source"] == "the config partition LABEL=NODEOS-CFG"
    assert st["provision"]["error"]["field"] == field and st["provision"]["error"]["allowed"]
    human = daemon.cli("status", check=True).stdout
    assert "not applied: " in human and f"(field: {field})" in human
    shown = subprocess.run(
        [NODEOS, "provision", "show", "--state-dir", str(daemon.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"(field: {field})" in shown.stdout
    assert "ignored     the kernel command line" in shown.stdout, "the cmdline is named as overridden"

    # Fixed: applied, and status says from where.
    (tmp_path / "cfg" / "nodeos.toml").write_text('hostname = "s1"\n')
    r = _apply(tmp_path, daemon.state_dir)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "root" / "etc" / "hostname").read_text() == "s1\n"
    st = daemon.cli_json("status")
    assert st["provision"]["result"] == "applied" and "error" not in st["provision"]
    assert os.stat(daemon.state_dir / "provision" / "state.json").st_mode & 0o077 == 0
