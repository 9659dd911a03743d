"""`nodeos net` command-line behaviour that needs no privileges: config errors exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nodeos.cli.main import cli


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.output


def test_missing_config_file_is_bad_input(tmp_path: Path) -> None:
    code, out = run("net", "plan", "--config", str(tmp_path / "nope.toml"), "--json")
    assert code == 2
    assert json.loads(out)["error"]["field"] == "--config"


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "net.toml"
    p.write_text("[qos\nprofile = 1\n")
    code, out = run("net", "verify", "--config", str(p))
    assert code == 2 and "is not valid TOML" in out


def test_out_of_range_value_is_reported_with_allowed_values(tmp_path: Path) -> None:
    p = tmp_path / "net.toml"
    p.write_text('[[interfaces]]\nname = "ens1f0"\n[qos]\nprofile = "roce-lossless"\ncnp_dscp = 70\n')
    code, out = run("net", "apply", "--config", str(p), "--yes")
    assert code == 2
    assert "qos.cnp_dscp" in out and "0-63" in out


def test_every_subcommand_has_json() -> None:
    for sub in ("show", "plan", "apply", "verify", "watch", "rdma"):
        code, out = run("net", sub, "--help")
        assert code == 0 and "--json" in out, sub
