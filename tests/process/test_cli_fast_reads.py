"""The console's fast path (nodeos.cli.fast) answers the `--json` reads scripts poll exactly as
the click commands do, against a real daemon: the same stdout and exit code, errors included."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nodeos.cli import fast
from tests.process.conftest import Daemon

pytestmark = pytest.mark.process
CLICK = "import sys; from nodeos.cli.main import cli; cli.main(args=sys.argv[1:], prog_name='nodeos')"
HOST = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000f1"


def _run(daemon: Daemon, argv: list[str], via_click: bool) -> tuple[int, str, str]:
    env = {**os.environ, "NODEOS_SOCKET": str(daemon.socket)}
    cmd = (
        [sys.executable, "-c", CLICK, *argv]
        if via_click
        else [sys.executable, "-m", "nodeos.cli.main", *argv]
    )
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["pool", "list", "--json"],
        ["volume", "list", "--json"],
        ["host", "list", "--json"],
        ["node", "list", "--json"],
        ["cluster", "status", "--json"],
        ["volume", "show", "nosuch", "--json"],  # an error reply: same JSON, same exit code
    ],
)
def test_a_fast_read_answers_as_the_click_command_does(shared_daemon: Daemon, argv: list[str]) -> None:
    assert fast._parse(argv) is not None  # this command line does take the fast path
    if not json.loads(shared_daemon.cli("host", "list", "--json", check=True).stdout):
        shared_daemon.cli("host", "add", HOST, check=True)  # a list with something in it
    # The daemon's state may move between two reads (`cluster status`: its commit index, as the
    # node's own reports commit; CI 2026-11-27): click's read between two equal fast ones (the
    # indexes only grow) saw the same state.
    for _ in range(10):
        rc, out, err = _run(shared_daemon, argv, via_click=False)
        rc_click, out_click, _ = _run(shared_daemon, argv, via_click=True)
        if _run(shared_daemon, argv, via_click=False)[:2] == (rc, out):
            break
    else:
        pytest.fail(f"{argv}: the daemon's answer changed between every two reads")
    assert (rc, json.loads(out)) == (rc_click, json.loads(out_click)), err
    assert out == out_click  # byte for byte: the same rendering
    if argv[:2] == ["volume", "show"]:
        assert rc != 0 and json.loads(out)["error"]["code"] == "not_found", out
    else:
        assert rc == 0


def test_a_fast_read_on_a_dead_socket_fails_as_click_does(tmp_path: object) -> None:
    dead = Daemon(tmp_path)  # never started: its socket does not exist
    for argv in (["pool", "list", "--json"], ["volume", "show", "v1", "--json"]):
        fast_res = _run(dead, argv, via_click=False)
        click_res = _run(dead, argv, via_click=True)
        assert fast_res[:2] == click_res[:2] and fast_res[0] == 1, (fast_res, click_res)
        assert json.loads(fast_res[1])["error"]["field"] == "socket"
