"""The system phase against a temporary root: real files with real modes, a second apply that
changes nothing, an invalid configuration that changes nothing, and a join token that is
staged root-only and written nowhere else."""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeos.errors import BadInput, OperationFailed
from nodeos.provision import render, sources, state
from nodeos.provision.apply import STAGED_TOKEN, apply_system

from .helpers import KEY, VALID_TOML, join_token

LAB_NODEOSD = '# written by nodeos-lab-init\nnode_name = "old"\nlease_s = 8.0\nraft_tick_ms = 300\n'

# Every process this test process starts, from Python's own audit events: a token must never
# be on a command line (ps shows it) or in an environment.
SPAWNED: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system", "os.spawn"):
        SPAWNED.append(repr(args))


sys.addaudithook(_audit)


def _snapshot(root: Path) -> dict[str, tuple[int, bytes, int]]:
    """Every file and directory under root: (mode, content, inode) - what `changed nothing` means."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_mode, p.read_bytes() if p.is_file() else b"", st.st_ino)
    return out


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "root"
    (root / "etc" / "nodeos").mkdir(parents=True)
    (root / "etc" / "nodeos" / "nodeosd.toml").write_text(LAB_NODEOSD)
    (root / "etc" / "hostname").write_text("debian\n")
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "nodeos.toml").write_text(VALID_TOML)
    token_file = cfg / "join.token"
    token_file.write_text(join_token() + "\n")
    token_file.chmod(0o600)
    return {
        "root": root,
        "state": tmp_path / "state",
        "cfg": cfg,
        "run": tmp_path / "run",
        "creds": tmp_path / "creds",
    }


def _apply(n: dict[str, Path], found: sources.Found | None = None) -> Any:
    found = found if found is not None else sources.from_partition(n["cfg"])
    return apply_system(
        n["root"], n["state"], found, [], creds_dir=str(n["creds"]), runtime_dir=n["run"], effects=False
    )


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_apply_writes_the_files_with_their_modes(node: dict[str, Path]) -> None:
    out = _apply(node)
    root = node["root"]
    assert out.result == "applied"
    assert (root / "etc/hostname").read_text() == "s1\n"
    eno1 = (root / "etc/systemd/network/50-nodeos-eno1.network").read_text()
    assert "Name=eno1" in eno1 and "Address=192.0.2.11/24" in eno1
    assert "Destination=0.0.0.0/0" in eno1 and "Gateway=192.0.2.1" in eno1 and "MTUBytes" not in eno1
    ens = (root / "etc/systemd/network/50-nodeos-ens1f0.network").read_text()
    assert "MTUBytes=9000" in ens and "Address=198.51.100.11/24" in ens
    keys = root / "root/.ssh/authorized_keys"
    assert KEY in keys.read_text().splitlines()
    assert _mode(keys) == 0o600 and _mode(keys.parent) == 0o700
    assert "PasswordAuthentication no" in (root / render.SSHD_DROPIN).read_text()
    assert "NTP=192.0.2.1 ntp.example.net" in (root / render.TIMESYNCD_DROPIN).read_text()
    import tomllib

    conf = tomllib.loads((root / "etc/nodeos/nodeosd.toml").read_text())
    assert conf["node_name"] == "s1" and conf["storage_address"] == ["198.51.100.11"]
    assert conf["peer_listen"] == "198.51.100.11:7100" and conf["metrics_listen"] == "192.0.2.11:9810"
    assert conf["lease_s"] == 8.0 and conf["raft_tick_ms"] == 300, "the file's other keys are kept"
    st = state.load(node["state"])
    assert st["result"] == "applied" and st["cluster"] == {"action": "join", "state": "pending"}
    assert _mode(state.path(node["state"])) == 0o600 and _mode(state.path(node["state"]).parent) == 0o700
    assert st["applied"]["plan"]["labels"] == {"rack": "r1", "switch": "sw1"}


def test_a_second_apply_changes_nothing(node: dict[str, Path]) -> None:
    _apply(node)
    before = _snapshot(node["root"])
    out = _apply(node)
    assert out.result == "unchanged" and out.changed == []
    assert _snapshot(node["root"]) == before, "not one file rewritten (same inode, mode, content)"


def test_a_mode_put_wrong_is_put_right(node: dict[str, Path]) -> None:
    _apply(node)
    keys = node["root"] / "root/.ssh/authorized_keys"
    keys.chmod(0o644)
    keys.parent.chmod(0o755)
    out = _apply(node)
    assert out.changed == ["root/.ssh/authorized_keys"]
    assert _mode(keys) == 0o600 and _mode(keys.parent) == 0o700


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (('"198.51.100.11/24"', '"198.51.100.300/24"'), "network.interfaces[1].addresses[0]"),
        (('hostname = "s1"', 'hostname = "s_1"'), "hostname"),
        (('rack = "r1"', 'rack = "r 1"'), "labels.rack"),
    ],
)
def test_an_invalid_configuration_changes_nothing(
    node: dict[str, Path], edit: tuple[str, str], field: str
) -> None:
    (node["cfg"] / "nodeos.toml").write_text(VALID_TOML.replace(*edit))
    before = _snapshot(node["root"])
    with pytest.raises(BadInput) as exc:
        _apply(node)
    assert exc.value.field == field
    assert _snapshot(node["root"]) == before
    assert not node["run"].exists(), "no token staged either"
    st = state.load(node["state"])
    assert st["result"] == "invalid" and st["error"]["field"] == field and st["error"]["allowed"]
    assert state.summary(node["state"])["error"]["field"] == field  # what `nodeos status` shows


def test_an_invalid_configuration_after_a_valid_one_keeps_the_valid_one(node: dict[str, Path]) -> None:
    _apply(node)
    before = _snapshot(node["root"])
    (node["cfg"] / "nodeos.toml").write_text(VALID_TOML.replace('"192.0.2.11/24"', '"192.0.2.11"'))
    with pytest.raises(BadInput):
        _apply(node)
    assert _snapshot(node["root"]) == before
    st = state.load(node["state"])
    assert st["result"] == "invalid" and st["applied"]["plan"]["hostname"] == "s1"


def test_a_join_token_that_cannot_be_read_or_is_not_one_changes_nothing(node: dict[str, Path]) -> None:
    before = _snapshot(node["root"])
    (node["cfg"] / "join.token").write_text("not-a-token\n")
    with pytest.raises(BadInput) as exc:
        _apply(node)
    assert exc.value.field == "cluster.token_file" and exc.value.allowed
    (node["cfg"] / "join.token").unlink()
    with pytest.raises(BadInput) as exc:
        _apply(node)
    assert exc.value.field == "cluster.token_file"
    assert _snapshot(node["root"]) == before


def test_an_interface_dropped_from_the_configuration_loses_its_file(node: dict[str, Path]) -> None:
    _apply(node)
    text = VALID_TOML.split('[[network.interfaces]]\nname = "ens1f0"')[0]
    text = text.replace('storage_addresses = ["198.51.100.11"]\n', "") + "\n"
    (node["cfg"] / "nodeos.toml").write_text(text)
    out = _apply(node)
    assert "-etc/systemd/network/50-nodeos-ens1f0.network" in out.changed
    assert not (node["root"] / "etc/systemd/network/50-nodeos-ens1f0.network").exists()
    assert (node["root"] / "etc/systemd/network/50-nodeos-eno1.network").exists()


def test_no_configuration_is_recorded_and_changes_nothing(node: dict[str, Path]) -> None:
    before = _snapshot(node["root"])
    out = apply_system(
        node["root"], node["state"], None, [], creds_dir="", runtime_dir=node["run"], effects=False
    )
    assert out.result == "none" and _snapshot(node["root"]) == before
    assert state.load(node["state"])["result"] == "none"


def test_a_broken_nodeosd_toml_is_refused_before_anything_is_written(node: dict[str, Path]) -> None:
    (node["root"] / "etc/nodeos/nodeosd.toml").write_text("lease_s = \n")
    before = _snapshot(node["root"])
    with pytest.raises(OperationFailed):
        _apply(node)
    assert _snapshot(node["root"]) == before
    assert state.load(node["state"])["result"] == "failed"


def test_the_token_is_staged_root_only_and_nowhere_else(
    node: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    token = (node["cfg"] / "join.token").read_text().strip()
    SPAWNED.clear()
    with caplog.at_level(logging.DEBUG):
        _apply(node)
        _apply(node)
    staged = node["run"] / STAGED_TOKEN
    assert staged.read_text().strip() == token
    assert _mode(staged) == 0o600 and _mode(node["run"]) == 0o700
    holders = [
        p
        for base in (node["root"], node["state"], node["run"])
        for p in base.rglob("*")
        if p.is_file() and token in p.read_text(errors="replace")
    ]
    assert holders == [staged]
    assert token not in caplog.text
    assert all(token not in s for s in SPAWNED)


def test_a_token_credential_is_read_from_the_credentials_directory(node: dict[str, Path]) -> None:
    node["creds"].mkdir(mode=0o700)
    token = join_token()
    (node["creds"] / "nodeos.join-token").write_text(token)
    text = VALID_TOML.replace('token_file = "join.token"', 'token_credential = "nodeos.join-token"')
    (node["creds"] / sources.CREDENTIAL).write_text(text)
    out = _apply(node, sources.from_credentials(node["creds"]))
    assert out.source == "the systemd credential nodeos.provision"
    assert (node["run"] / STAGED_TOKEN).read_text().strip() == token


def test_the_cluster_step_does_nothing_after_an_invalid_configuration(node: dict[str, Path]) -> None:
    from nodeos.provision.apply import apply_cluster

    (node["cfg"] / "nodeos.toml").write_text(VALID_TOML.replace('hostname = "s1"', 'hostname = "-s1"'))
    with pytest.raises(BadInput):
        _apply(node)

    class Unreachable:
        def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
            raise AssertionError(f"nodeosd asked {method} after an invalid configuration")

    out = apply_cluster(node["state"], Unreachable(), runtime_dir=node["run"])
    assert out.result == "skipped"


def test_status_lines_say_the_error_or_the_source() -> None:
    from nodeos.cli.render import status_human

    base: dict[str, Any] = {"node_name": "s1", "dataplane": {}}
    bad = {
        "result": "invalid",
        "source": "the kernel command line",
        "error": {
            "code": "bad_input",
            "message": "hostname '-s1' is not a host name",
            "field": "hostname",
            "allowed": "1-63 letters",
        },
    }
    text = status_human({**base, "provision": bad})
    assert "ERROR     provisioning from the kernel command line, not applied:" in text
    assert "(field: hostname); allowed: 1-63 letters" in text
    good = {"result": "unchanged", "applied_from": "the systemd credential nodeos.provision"}
    assert "provision unchanged from the systemd credential nodeos.provision" in status_human(
        {**base, "provision": good}
    )
    gone = {"result": "none", "applied_from": "the config partition LABEL=NODEOS-CFG"}
    assert "applied earlier from the config partition" in status_human({**base, "provision": gone})
    assert "provision" not in status_human(base)
