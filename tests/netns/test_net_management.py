"""The management path: confirmation before risky changes, automatic rollback when lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeos.net.mgmt import icmp_echo
from nodeos.net.netns import run_in
from tests.netns.conftest import Netns, nodeos, write_config

pytestmark = pytest.mark.netns


MGMT = """
[management]
interface = "va"
probe = "10.0.0.2"
timeout = 3

[[interfaces]]
name = "va"
addresses = {addresses}
[qos]
profile = "none"
"""


def addresses(ns: Netns) -> set[str]:
    info = json.loads(ns.ip("-j", "addr", "show", "va").stdout)[0]["addr_info"]
    return {f"{a['local']}/{a['prefixlen']}" for a in info if a["scope"] == "global"}


def test_readdressing_that_loses_the_probe_is_rolled_back(pair: tuple[Netns, Netns], tmp_path: Path) -> None:
    node, _peer = pair
    cfg = write_config(tmp_path, MGMT.format(addresses='["10.9.0.1/24"]'))
    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes")
    assert res.code == 1
    assert "management path lost" in res.err and "10.0.0.2 does not answer" in res.err
    assert "rolled back" in res.err
    assert addresses(node) == {"10.0.0.1/24"}
    assert run_in(node.name, lambda: icmp_echo("10.0.0.2", timeout=2))


def test_change_that_keeps_the_path_is_kept(pair: tuple[Netns, Netns], tmp_path: Path) -> None:
    node, _peer = pair
    cfg = write_config(tmp_path, MGMT.format(addresses='["10.0.0.1/24", "10.9.0.1/24"]'))
    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes", "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["management"] == {"ok": True, "problems": []} and not out["rolled_back"]
    assert addresses(node) == {"10.0.0.1/24", "10.9.0.1/24"}


def test_link_down_on_the_management_interface_is_rolled_back(
    pair: tuple[Netns, Netns], tmp_path: Path
) -> None:
    node, _peer = pair
    text = MGMT.format(addresses='["10.0.0.1/24"]').replace(
        'addresses = ["10.0.0.1/24"]', 'addresses = ["10.0.0.1/24"]\nup = false'
    )
    res = nodeos("net", "apply", "--config", str(write_config(tmp_path, text)), "--netns", node.name, "--yes")
    assert res.code == 1 and "management interface va is down" in res.err
    assert "UP" in json.loads(node.ip("-j", "link", "show", "va").stdout)[0]["flags"]


def test_without_yes_a_script_is_refused_and_nothing_changes(
    pair: tuple[Netns, Netns], tmp_path: Path
) -> None:
    node, _peer = pair
    cfg = write_config(tmp_path, MGMT.format(addresses='["10.0.0.1/24", "10.9.0.1/24"]'))
    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, stdin="")
    assert res.code == 2
    assert "--yes" in res.err and "va: add address 10.9.0.1/24" in res.err
    assert addresses(node) == {"10.0.0.1/24"}


@pytest.mark.parametrize(("answer", "code"), [("n", 2), ("y", 0)])
def test_terminal_asks_before_touching_the_management_path(
    pair: tuple[Netns, Netns], tmp_path: Path, answer: str, code: int
) -> None:
    node, _peer = pair
    cfg = write_config(tmp_path, MGMT.format(addresses='["10.0.0.1/24", "10.9.0.1/24"]'))
    master, slave = os.openpty()
    try:
        os.write(master, f"{answer}\n".encode())
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodeos.cli.main",
                "net",
                "apply",
                "--config",
                str(cfg),
                "--netns",
                node.name,
            ],
            stdin=slave,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "can cut this node off its management path" in proc.stdout
    expected = {"10.0.0.1/24", "10.9.0.1/24"} if answer == "y" else {"10.0.0.1/24"}
    assert addresses(node) == expected
