"""Which command lines the console answers without click, and that the rest reach click."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeos import validate
from nodeos.cli import fast
from nodeos.errors import BadInput

SOCK = "/run/nodeos/api.sock"


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["status"], (SOCK, "status", None, False, None)),
        (["status", "--json"], (SOCK, "status", None, True, None)),
        (["--socket", "/tmp/a.sock", "status"], ("/tmp/a.sock", "status", None, False, None)),
        (["--socket=/tmp/a.sock", "status", "--json"], ("/tmp/a.sock", "status", None, True, None)),
        (["pool", "list", "--json"], (SOCK, "pool.list", None, True, None)),
        (["volume", "list", "--json"], (SOCK, "volume.list", None, True, None)),
        (["host", "list", "--json"], (SOCK, "host.list", None, True, None)),
        (["node", "list", "--json"], (SOCK, "node.list", None, True, None)),
        (["cluster", "status", "--json"], (SOCK, "cluster.status", {}, True, 60.0)),
        (["volume", "show", "v1", "--json"], (SOCK, "volume.show", {"name": "v1"}, True, None)),
        (["--socket", "/s", "volume", "show", "a.b_c-9", "--json"],
         ("/s", "volume.show", {"name": "a.b_c-9"}, True, None)),
    ],
)  # fmt: skip
def test_plain_status_and_json_reads_take_the_fast_path(
    argv: list[str], want: tuple[object, ...], monkeypatch: pytest.MonkeyPatch
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
        ["pool", "list"],  # human output: the click command renders it
        ["pool", "list", "--help"],
        ["pool", "list", "--json", "--json"],
        ["pool", "--json", "list"],
        ["pool", "create", "p", "--json"],  # a write: never on this path
        ["volume", "show", "--json"],
        ["volume", "show", "-x", "--json"],  # names click's validation refuses go to click
        ["volume", "show", ".hidden", "--json"],
        ["volume", "show", "a b", "--json"],
        ["volume", "show", "x" * 64, "--json"],
        ["volume", "show", "v1", "v2", "--json"],
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


@given(st.text(alphabet=st.sampled_from("aZ09._- /é\n"), max_size=70))
def test_the_fast_paths_name_check_accepts_exactly_what_validate_name_accepts(name: str) -> None:
    try:
        validate.name(name)
        valid = True
    except BadInput:
        valid = False
    assert fast._plain_name(name) == valid
