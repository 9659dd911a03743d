"""Provisioning's cluster step against real nodeosd processes: `init` on one node and `join`
on another, each from its configuration, through the daemon's own API (what `nodeos cluster`
calls); labels set; done once (a second run, as on a second boot, joins nothing again). The
join token goes from its file to the daemon's socket only: no command line shows it while the
join runs, and no file, record or output holds it afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.token import decode_token
from nodeos.errors import BadInput
from nodeos.provision import sources, state
from nodeos.provision.apply import STAGED_TOKEN, apply_cluster, apply_system
from nodeos.rpc.client import Client
from tests.process.cluster_cli import cli, ok, started_nodes

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

NODEOS = str(Path(sys.executable).parent / "nodeos")


@pytest.fixture
def nodes(tmp_path: Path) -> Any:
    yield from started_nodes(tmp_path)


def _provision(tmp: Path, name: str, text: str, token: str | None = None) -> dict[str, Path]:
    d = {k: tmp / f"{name}-{k}" for k in ("root", "state", "cfg", "run")}
    d["root"].mkdir()
    d["cfg"].mkdir()
    (d["cfg"] / "nodeos.toml").write_text(text)
    if token is not None:
        (d["cfg"] / "join.token").write_text(token + "\n")
        (d["cfg"] / "join.token").chmod(0o600)
    found = sources.from_partition(d["cfg"])
    apply_system(d["root"], d["state"], found, [], creds_dir="", runtime_dir=d["run"], effects=False)
    return d


def _tokens_in(obj: Any) -> list[str]:
    """Every string in a JSON-like value that is a join token."""
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tokens_in(v)]
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in _tokens_in(v)]
    if isinstance(obj, str) and len(obj) > 40:
        try:
            decode_token(obj)
        except BadInput:
            return []
        return [obj]
    return []


def _cmdlines_holding(secret: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if secret in cmd:
                out.append(f"{pid}: {cmd!r}")
    return out


def test_init_then_join_from_configurations_once_with_labels(nodes: Any, tmp_path: Path) -> None:
    n1, n2 = nodes(1), nodes(2)
    p1 = _provision(tmp_path, "n1", '[labels]\nrack = "r1"\n\n[cluster]\naction = "init"\n')
    out = apply_cluster(p1["state"], Client(n1.socket), runtime_dir=p1["run"])
    assert out.result == "done"
    st1 = ok(cli(n1, "status"))
    assert st1["member"] and st1["cluster_id"] == state.load(p1["state"])["cluster"]["cluster_id"]
    # `cluster.init` answers with a join token: kept nowhere, shown nowhere.
    assert not _tokens_in(state.load(p1["state"])) and not _tokens_in(out.to_dict())
    token = ok(cli(n1, "token", "--ttl", "600"))["token"]

    text = (
        f'[labels]\nrack = "r2"\n\n[cluster]\naction = "join"\naddress = "{n1.address}"\n'
        'token_file = "join.token"\n'
    )
    p2 = _provision(tmp_path, "n2", text, token)
    assert (p2["run"] / STAGED_TOKEN).exists()
    # The console's own entry point, as the unit runs it; every command line on the machine is
    # read while the join runs.
    proc = subprocess.Popen(
        [
            NODEOS,
            "--socket",
            n2.socket,
            "provision",
            "apply",
            "--phase",
            "cluster",
            "--state-dir",
            str(p2["state"]),
            "--runtime-dir",
            str(p2["run"]),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    while proc.poll() is None:
        seen += _cmdlines_holding(token)
        time.sleep(0.01)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, (stdout, stderr)
    assert seen == [], "the token was on a command line"
    assert token not in stdout + stderr
    assert json.loads(stdout)["result"] == "done"
    assert not (p2["run"] / STAGED_TOKEN).exists(), "the staged token is gone once used"

    members = ok(cli(n1, "status"))["members"]
    assert sorted(m["name"] for m in members) == ["n1", "n2"]
    labels = {r["name"]: r["labels"] for r in n1.call("node.list")}
    assert labels["n1"].get("rack") == "r1" and labels["n2"].get("rack") == "r2"
    for p in (p1, p2):
        for f in [*p["state"].rglob("*"), *p["root"].rglob("*"), *p["run"].rglob("*")]:
            assert not f.is_file() or token not in f.read_text(errors="replace"), f
    for log in (n1.root / "nodeosd.log", n2.root / "nodeosd.log"):
        assert token not in log.read_text(errors="replace"), log

    # A second boot: the cluster step is recorded as done and runs nothing.
    again = apply_cluster(p2["state"], Client(n2.socket), runtime_dir=p2["run"])
    assert again.result == "unchanged" and "not run again" in again.notes[0]
    again = apply_cluster(p1["state"], Client(n1.socket), runtime_dir=p1["run"])
    assert again.result == "unchanged"
    assert sorted(m["name"] for m in ok(cli(n1, "status"))["members"]) == ["n1", "n2"]

    # A new configuration with other labels: provisioning's old label goes, one set by hand stays.
    n1.call("node.label", {"node": "n1", "set": {"owner": "ops"}, "remove": []})
    (p1["cfg"] / "nodeos.toml").write_text('[labels]\nzone = "z1"\n\n[cluster]\naction = "init"\n')
    apply_system(
        p1["root"],
        p1["state"],
        sources.from_partition(p1["cfg"]),
        [],
        creds_dir="",
        runtime_dir=p1["run"],
        effects=False,
    )
    out = apply_cluster(p1["state"], Client(n1.socket), runtime_dir=p1["run"])
    assert out.changed == ["labels zone=z1 rack-"]
    labels = {r["name"]: r["labels"] for r in n1.call("node.list")}
    assert labels["n1"].get("zone") == "z1" and "rack" not in labels["n1"] and labels["n1"]["owner"] == "ops"


def test_a_member_found_is_recorded_not_joined_again(nodes: Any, tmp_path: Path) -> None:
    """The record lost (or the cluster formed by hand): a member is never asked to init again."""
    n1 = nodes(1)
    ok(cli(n1, "init"))
    p = _provision(tmp_path, "n1", '[cluster]\naction = "init"\n')
    out = apply_cluster(p["state"], Client(n1.socket), runtime_dir=p["run"])
    assert state.load(p["state"])["cluster"]["how"] == "found a member of"
    assert out.result == "done"


def test_a_join_waits_for_a_member_that_is_not_up_yet(nodes: Any, tmp_path: Path) -> None:
    """Nodes boot in any order: the joiner retries while the member it names is down."""
    import threading

    n1, n2 = nodes(1), nodes(2)
    ok(cli(n1, "init"))
    token = ok(cli(n1, "token", "--ttl", "600"))["token"]
    n1.kill()
    text = f'[cluster]\naction = "join"\naddress = "{n1.address}"\ntoken_file = "join.token"\n'
    p2 = _provision(tmp_path, "n2", text, token)
    threading.Timer(3.0, n1.start).start()
    out = apply_cluster(
        p2["state"],
        Client(n2.socket, timeout_s=30),
        runtime_dir=p2["run"],
        wait_s=120,
        sleep=lambda s: time.sleep(1.0),
    )
    assert out.result == "done"
    assert sorted(m["name"] for m in ok(cli(n1, "status"))["members"]) == ["n1", "n2"]
