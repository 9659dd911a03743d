"""Usage errors (issue 25, probe 4): with `--json` anywhere on the command line, click's usage
errors are the console's JSON error object on stdout, exit 2; without it, click's text on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeos.cli.main import cli

NODEOS = str(Path(sys.executable).parent / "nodeos")
NO_DAEMON = {"NODEOS_SOCKET": "/nonexistent/nodeos-test/api.sock"}


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args), env=NO_DAEMON)
    return r.exit_code, r.stdout, r.stderr


def error_of(stdout: str) -> dict[str, Any]:
    doc = json.loads(stdout)
    assert set(doc) == {"error"}
    err = doc["error"]
    assert err["code"] == "bad_input" and err["message"]
    assert set(err) <= {"code", "message", "field", "allowed"}
    return dict(err)


@pytest.mark.parametrize(
    ("argv", "field", "allowed"),
    [
        (["events", "--since", "-1", "--json"], "since", "x>=0"),
        (["events", "--json", "--scope", "planet"], "scope", ["auto", "cluster", "node"]),
        (["cluster", "remove", "abc", "--json"], "node_id", None),
        (
            ["cluster", "join", "127.0.0.1:7100", "--token-file", "-", "--node-id", "0", "--json"],
            "node_id",
            None,
        ),
        (["net", "plan", "--json"], "config", None),
        (["volume", "list", "--bogus", "--json"], "--bogus", ["--help", "--json"]),
        (["bogus", "--json"], "command", None),
        (["volume", "bogus", "--json"], "command", None),
        (["--json", "volume", "list"], "--json", ["--help", "--socket"]),
        (["volume", "show", "a", "b", "--json"], "arguments", None),
    ],
)
def test_a_usage_error_with_json_is_a_json_error_exit_2(argv: list[str], field: str, allowed: Any) -> None:
    code, out, err = run(*argv)
    assert code == 2, (out, err)
    e = error_of(out)
    assert e["field"] == field
    if allowed is not None:
        assert e["allowed"] == allowed
    assert "Usage:" not in out and "Usage:" not in err


def test_an_unknown_command_lists_the_commands_there_are() -> None:
    code, out, _ = run("volume", "bogus", "--json")
    assert code == 2
    allowed = error_of(out)["allowed"]
    assert "create" in allowed and "delete" in allowed and "bogus" not in allowed


def test_without_json_a_usage_error_stays_clicks_text_on_stderr() -> None:
    code, out, err = run("events", "--since", "-1")
    assert code == 2 and out == ""
    assert "Usage: " in err and "Invalid value for '--since'" in err


def test_the_installed_console_prints_the_json_error_too() -> None:
    r = subprocess.run(
        [NODEOS, "cluster", "remove", "abc", "--json"],
        env={**os.environ, **NO_DAEMON},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr == "", r.stderr
    assert error_of(r.stdout)["field"] == "node_id"


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["status", "--bogus", "--json"], "--bogus"),
        (["status", "extra", "--json"], "arguments"),
        (["pool", "list", "--bogus", "--json"], "--bogus"),
        (["cluster", "status", "extra", "--json"], "arguments"),
        (["volume", "show", "--json"], "name"),
    ],
)
def test_the_fast_reads_usage_errors_are_json_too(argv: list[str], field: str) -> None:
    """These commands skip click when their line is well formed (nodeos/cli/fast.py): a wrong
    one still ends as the JSON error, without a daemon asked."""
    r = subprocess.run(
        [NODEOS, *argv], env={**os.environ, **NO_DAEMON}, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and r.stderr == "", (r.stdout, r.stderr)
    assert error_of(r.stdout)["field"] == field
