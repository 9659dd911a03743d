"""`nodeos provision check`: validate only, a file or command line words; a bad field exits 2
with the console's error shape (code, field, allowed), with and without --json."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nodeos.cli.main import cli

from .helpers import VALID_TOML


def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args), input=stdin)
    return res.exit_code, res.output


def test_check_a_valid_file_prints_its_plan(tmp_path: Path) -> None:
    f = tmp_path / "nodeos.toml"
    f.write_text(VALID_TOML)
    code, out = run("provision", "check", str(f))
    assert code == 0 and out.startswith("valid\n") and "interface   ens1f0 mtu 9000" in out
    code, out = run("provision", "check", str(f), "--json")
    assert code == 0 and json.loads(out)["cluster"]["token_file"] == str(tmp_path / "join.token")
    code, out = run("provision", "check", "-", "--json", stdin=VALID_TOML)
    assert code == 0 and json.loads(out)["hostname"] == "s1"


def test_check_a_bad_field_exits_2_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "nodeos.toml"
    f.write_text(VALID_TOML.replace("mtu = 9000", "mtu = 90000"))
    code, out = run("provision", "check", str(f), "--json")
    err = json.loads(out)["error"]
    assert code == 2 and err["code"] == "bad_input"
    assert err["field"] == "network.interfaces[1].mtu" and err["allowed"] == "68-9216"
    code, out = run("provision", "check", str(f))
    assert code == 2 and "(field: network.interfaces[1].mtu); allowed: 68-9216" in out


def test_check_a_file_that_is_not_toml_or_not_there(tmp_path: Path) -> None:
    f = tmp_path / "nodeos.toml"
    f.write_text("hostname = \n")
    code, out = run("provision", "check", str(f), "--json")
    assert code == 2 and json.loads(out)["error"]["field"] == "config"
    code, out = run("provision", "check", str(tmp_path / "nope.toml"), "--json")
    assert code == 2 and json.loads(out)["error"]["field"] == "file"


def test_check_kernel_command_line_words() -> None:
    code, out = run(
        "provision", "check", "--cmdline", "quiet nodeos.hostname=s3 nodeos.ntp=192.0.2.1", "--json"
    )
    assert code == 0 and json.loads(out)["ntp"] == ["192.0.2.1"]
    code, out = run("provision", "check", "--cmdline", "nodeos.mtu=eth0:jumbo", "--json")
    assert code == 2 and json.loads(out)["error"]["field"] == "network.interfaces[0].mtu"
    code, out = run("provision", "check", "--cmdline", "quiet nodeos.lab=1", "--json")
    assert code == 2 and json.loads(out)["error"]["field"] == "cmdline"
