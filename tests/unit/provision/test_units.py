"""The provisioning units: ordered before what reads their files and before nodeosd (the
system phase), after nodeosd is ready (the cluster phase), with command lines the console
takes and no secret on them."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import click
import pytest

from nodeos.cli.provision import provision

UNITS = Path(__file__).resolve().parents[3] / "systemd"


def unit(name: str) -> dict[str, list[str]]:
    """Every key of the unit, its values (a key given twice adds up, as systemd reads it)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _eq, value = line.partition("=")
        out.setdefault(f"{section}.{key}", []).extend(
            value.split() if key in ("Before", "After", "Wants", "Requires") else [value]
        )
    return out


def test_the_system_phase_runs_before_what_reads_its_files() -> None:
    u = unit("nodeos-provision.service")
    for reader in (
        "systemd-networkd.service",
        "ssh.service",
        "nodeosd.service",
        "network-pre.target",
    ):
        assert reader in u["Unit.Before"], reader
    assert "local-fs.target" in u["Unit.After"], "the state partition is mounted first"
    assert "sysinit.target" not in u["Unit.Before"], "a slow unit before this one must not hold up the boot"
    assert u["Service.Type"] == ["oneshot"] and u["Service.ImportCredential"] == ["nodeos.*"]
    assert "nodeos-provision.service" not in " ".join(unit("nodeosd.service").get("Unit.Requires", [])), (
        "an invalid configuration must not keep nodeosd from starting"
    )


def test_the_cluster_phase_runs_once_nodeosd_is_ready() -> None:
    u = unit("nodeos-provision-cluster.service")
    assert {"nodeosd.service", "nodeos-provision.service"} <= set(u["Unit.After"])
    assert "nodeosd.service" in u["Unit.Wants"] and "Unit.Requires" not in u, "a masked nodeosd fails nothing"
    assert u["Unit.ConditionPathExists"] == ["/var/lib/nodeos/provision/state.json"]
    assert u["Service.Type"] == ["oneshot"]


@pytest.mark.parametrize("name", ["nodeos-provision.service", "nodeos-provision-cluster.service"])
def test_exec_start_is_a_command_line_the_console_takes(name: str) -> None:
    (cmd,) = unit(name)["Service.ExecStart"]
    argv = shlex.split(cmd)
    assert argv[:3] == ["/usr/bin/nodeos", "provision", "apply"]
    ctx = provision.make_context("provision", argv[2:])
    sub = provision.get_command(ctx, "apply")
    assert isinstance(sub, click.Command)
    sub.make_context("apply", argv[3:])  # raises on an option the command does not know
    assert "token" not in cmd
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string((UNITS / name).read_text())
    assert parser["Service"]["UMask"] == "0077"
