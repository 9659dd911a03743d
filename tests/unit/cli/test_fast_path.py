"""Which command lines the console answers without click, and that the rest reach click."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nodeos.cli import fast


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["status"], ("/run/nodeos/api.sock", False)),
        (["status", "--json"], ("/run/nodeos/api.sock", True)),
        (["--socket", "/tmp/a.sock", "status"], ("/tmp/a.sock", False)),
        (["--socket=/tmp/a.sock", "status", "--json"], ("/tmp/a.sock", True)),
    ],
)
def test_plain_status_command_lines_take_the_fast_path(
    argv: list[str], want: tuple[str, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODEOS_SOCKET", raising=False)
    assert fast._parse(argv) == want


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["status", "--help"],
        ["status", "--bogus"],
        ["status", "--json", "--json"],
        ["--socket"],
        ["--socket", "status"],
        ["pool", "list"],
        ["--socket=", "status"],
    ],
)
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert fast._parse(argv) is None


def test_status_on_a_missing_socket_fails_like_the_click_command_without_importing_click(
    tmp_path: object,
) -> None:
    code = (
        "import sys, atexit\n"
        "heavy = ('click', 'asyncio', 'typing')\n"
        "atexit.register(lambda: print(sorted(m for m in heavy if m in sys.modules)))\n"
        "from nodeos.cli.main import main\n"
        "main(['--socket', '/nonexistent/api.sock', 'status'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("error: cannot reach nodeosd at /nonexistent/api.sock")
    assert "(field: socket)" in r.stderr
    assert r.stdout.strip() == "[]"  # neither click nor asyncio nor typing was imported


def test_a_typo_still_gets_clicks_usage_error_and_exit_2() -> None:
    code = "from nodeos.cli.main import main\nmain(['status', '--bogus'])\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "No such option '--bogus'" in r.stderr
