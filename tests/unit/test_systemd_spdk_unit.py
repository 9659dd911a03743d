"""The shipped SPDK target unit (systemd/nodeos-spdk.service) and how nodeosd is ordered after
it: what an operator relies on when a node has SPDK, and when it has not."""

from __future__ import annotations

import configparser
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from nodeos.daemon.config import Config
from nodeos.dataplane.spdk import target_setup
from nodeos.errors import BadInput

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"


def unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string((SYSTEMD / name).read_text())
    return cp


def environment(svc: configparser.SectionProxy) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in shlex.split(svc["Environment"]))


def expand(cmd: str, env: dict[str, str]) -> list[str]:
    """systemd's ${VAR} (one word) and $VAR (split on whitespace; unset: nothing)."""
    words: list[str] = []
    for w in shlex.split(cmd.lstrip("-")):
        if re.fullmatch(r"\$\w+", w):
            words += env.get(w[1:], "").split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w))
    return words


def test_nodeosd_wants_the_target_and_starts_after_it_but_does_not_require_it() -> None:
    u = unit("nodeosd.service")["Unit"]
    assert "nodeos-spdk.service" in u["Wants"].split() and "nodeos-spdk.service" in u["After"].split()
    for hard in ("Requires", "BindsTo", "Requisite", "PartOf"):
        assert "nodeos-spdk.service" not in u.get(hard, ""), f"{hard}: a node without SPDK would not start"
    assert "nodeosd.service" in unit("nodeos-spdk.service")["Unit"]["Before"].split()


def test_a_node_without_spdk_skips_the_unit_instead_of_failing() -> None:
    cp = unit("nodeos-spdk.service")
    binary = shlex.split(cp["Service"]["ExecStart"])[0]
    assert cp["Unit"]["ConditionPathExists"] == binary == "/usr/bin/nvmf_tgt"


def test_the_target_waits_for_rpc_and_gets_the_subsystem_limit_before_its_framework_starts() -> None:
    svc = unit("nodeos-spdk.service")["Service"]
    env = environment(svc)
    start = expand(svc["ExecStart"], env)
    assert "--wait-for-rpc" in start
    assert start[start.index("-r") + 1] == Config().spdk_socket  # where nodeosd looks
    post = expand(svc["ExecStartPost"], env)
    assert post[0] == "/usr/bin/nodeos-spdk-setup" and post[1] == "init"
    args = target_setup.parser({}).parse_args(post[1:])
    assert args.socket == Config().spdk_socket
    assert args.max_subsystems >= 10000  # issue 12: 10,000 volumes on one target
    calls = [m for m, _ in target_setup.init_requests(args.max_subsystems)]
    assert calls == ["nvmf_set_max_subsystems", "framework_start_init", "framework_wait_init"]


def test_hugepages_are_reserved_before_the_target_starts() -> None:
    svc = unit("nodeos-spdk.service")["Service"]
    pre = expand(svc["ExecStartPre"], environment(svc))
    args = target_setup.parser({}).parse_args(pre[1:])
    assert pre[0] == "/usr/bin/nodeos-spdk-setup" and args.cmd == "hugepages"
    assert target_setup.hugepages_count(args.mib) == args.mib // 2 >= 1024
    assert svc["LimitMEMLOCK"] == "infinity"  # pinned DMA memory


def test_the_rpc_socket_is_shared_and_the_helper_is_installed() -> None:
    svc = unit("nodeos-spdk.service")["Service"]
    assert svc["PrivateTmp"] == "no" and svc["Restart"] == "on-failure"
    scripts = tomllib.loads((SYSTEMD.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["nodeos-spdk-setup"] == "nodeos.dataplane.spdk.target_setup:main"


def test_setup_refuses_limits_spdk_would_reject() -> None:
    for bad in (0, 70000, "16384"):
        with pytest.raises(BadInput) as e:
            target_setup.init_requests(bad)  # type: ignore[arg-type]
        assert e.value.field == "max_subsystems"
    assert target_setup.hugepages_count(4096) == 2048 and target_setup.hugepages_count(3) == 2
