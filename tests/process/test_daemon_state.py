"""Hosts and other state as an operator handles them: durable across SIGKILL, bad input
refused with exit 2 and nothing changed, secrets never shown, witness refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeos.validate import make_dhchap_secret

from .conftest import Daemon

pytestmark = pytest.mark.process

H1 = "nqn.2014-08.com.example:host-1"
H2 = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"
SECRET = make_dhchap_secret(bytes(range(32)), 1)


def _nqns(d: Daemon) -> list[str]:
    return [h["nqn"] for h in d.cli_json("host", "list")]


def test_hosts_survive_sigkill_and_restart(daemon: Daemon) -> None:
    daemon.start()
    daemon.cli("host", "add", H1, "--dhchap-secret", SECRET, check=True)
    daemon.cli("host", "add", H2, check=True)
    daemon.kill9()
    daemon.start()
    hosts = {h["nqn"]: h for h in daemon.cli_json("host", "list")}
    assert set(hosts) == {H1, H2}
    assert hosts[H1]["dhchap"] is True and hosts[H2]["dhchap"] is False
    daemon.cli("host", "remove", H1, check=True)
    daemon.kill9()
    daemon.start()
    assert _nqns(daemon) == [H2]


def test_secret_is_never_listed_nor_logged(daemon: Daemon) -> None:
    daemon.start()
    daemon.cli("host", "add", H1, "--dhchap-secret", SECRET, check=True)
    listing = daemon.cli("host", "list", "--json", check=True).stdout
    human = daemon.cli("host", "list", check=True).stdout
    status = daemon.cli("status", "--json", check=True).stdout
    for text in (listing, human, status, daemon.log.read_text()):
        assert SECRET not in text
        assert SECRET.split(":")[2] not in text


def test_secret_from_a_file(daemon: Daemon) -> None:
    daemon.start()
    f = daemon.root / "secret"
    f.write_text(SECRET + "\n")
    daemon.cli("host", "add", H1, "--dhchap-secret-file", str(f), check=True)
    assert daemon.cli_json("host", "list")[0]["dhchap"] is True


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["host", "add", "iqn.2014-08.com.example:h"], "host"),
        (["host", "add", "nqn.2014-13.com.example:h"], "host"),
        (["host", "add", "nqn.2014-08.com.example:" + "a" * 200], "host"),
        (["host", "add", "nqn.2014-08.com.example:has space"], "host"),
        (["host", "add", "nqn.2014-08.org.nvmexpress.discovery"], "host"),
        (["host", "add", "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid"], "host"),
        (["host", "add", H2, "--dhchap-secret", "secret"], "dhchap_secret"),
        (["host", "add", H2, "--dhchap-secret", SECRET[:-6] + "AAAA=:"], "dhchap_secret"),
        (["host", "add", H1], "host"),  # duplicate of the one added by the test
        (["host", "remove", "nqn.2014-08.com.example:nobody"], "host"),
        (["volume", "create", "v1", "--size", "ten"], "size"),
        (["volume", "create", "v1", "--size", "100"], "size"),  # below 1 MiB
        (["volume", "create", "v1", "--size", "2EiB"], "size"),
        (["volume", "create", "v/1", "--size", "1GiB"], "name"),
        (["volume", "create", "x" * 64, "--size", "1GiB"], "name"),
        (["volume", "create", "v1", "--size", "1GiB", "--pool", "bad pool"], "pool"),
        (["volume", "create", "v1", "--size", "1GiB", "--qos-iops", "1500"], "qos_iops"),
        (["volume", "create", "v1", "--size", "1GiB", "--qos-mbps", "0"], "qos_mbps"),
        (["volume", "resize", "v1", "--size", "1.5"], "size"),
        (["volume", "grant", "v1", "--host", "host1"], "host"),
        (["volume", "snapshot", "v1", "bad/snap"], "snapshot"),
        (["volume", "clone", "s1", ".new"], "name"),
        (["pool", "create", "p1", "--drives", "a,,b"], "drives"),
        (["pool", "create", "p1", "--drives", "a,a"], "drives"),
        (["pool", "create", "", "--drives", "all"], "name"),
    ],
)
def test_bad_input_exits_2_names_the_field_and_changes_nothing(
    shared_daemon: Daemon, args: list[str], field: str
) -> None:
    daemon = shared_daemon
    if H1 not in _nqns(daemon):
        daemon.cli("host", "add", H1, check=True)
    before = daemon.cli_json("host", "list")
    r = daemon.cli(*args, "--json")
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert err["field"] == field
    assert err["message"]
    human = daemon.cli(*args)
    assert human.returncode == 2 and f"(field: {field})" in human.stderr
    assert daemon.cli_json("host", "list") == before
    assert daemon.cli_json("volume", "list") == []
    assert daemon.cli_json("pool", "list") == []


def test_usage_errors_exit_2(daemon: Daemon) -> None:
    daemon.start()
    for args in (
        ["volume", "create", "v1"],
        ["volume", "create", "v1", "--size", "1GiB", "--qos-iops", "many"],
        ["host", "add"],
        ["volume", "grant", "v1"],
    ):
        assert daemon.cli(*args).returncode == 2, args


def test_witness_looks_up_a_grants_volume_first(daemon: Daemon) -> None:
    daemon.start()
    daemon.cli("host", "add", H1, check=True)
    # The name is looked up before the witness says it stores nothing (issue 25, probe 6).
    r = daemon.cli("volume", "grant", "v1", "--host", H1)
    assert r.returncode == 2 and "does not exist" in r.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["volume", "create", "v1", "--size", "1GiB"], 1, "without a data plane"),
        (["pool", "create", "p1", "--drives", "all"], 1, "without a data plane"),
        # A name that does not exist is said first (tests/process/test_console_probes.py has all).
        (["pool", "delete", "p1"], 2, "does not exist"),
        (["volume", "delete", "v1"], 2, "does not exist"),
        (["volume", "snapshot", "v1", "s1"], 2, "does not exist"),
        (["volume", "resize", "v1", "--size", "2GiB"], 2, "does not exist"),
    ],
)
def test_witness_refuses_volume_and_pool_work_clearly(
    daemon: Daemon, args: list[str], code: int, needle: str
) -> None:
    daemon.start()
    r = daemon.cli(*args)
    assert r.returncode == code
    field = "dataplane" if code == 1 else "name"
    assert needle in r.stderr and f"(field: {field})" in r.stderr
    assert daemon.cli_json("volume", "list") == [] and daemon.cli_json("pool", "list") == []


def test_witness_lists_are_empty_and_drive_list_works(daemon: Daemon) -> None:
    daemon.start()
    assert daemon.cli_json("volume", "list") == []
    assert daemon.cli_json("pool", "list") == []
    assert isinstance(daemon.cli_json("drive", "list"), list)


def test_crash_after_commit_keeps_the_host(daemon: Daemon) -> None:
    """Injected kill at host.add:done (after the durable write, before the reply): the CLI
    sees a failure, and after a restart the host is there -- written before acknowledging."""
    daemon.env["NODEOS_CRASH_AT"] = "host.add:done"
    daemon.start()
    r = daemon.cli("host", "add", H1)
    assert r.returncode == 1
    assert daemon.proc.wait(timeout=30) == 137  # type: ignore[union-attr]
    assert "crash injected at host.add:done" in daemon.log.read_text()
    daemon.env.pop("NODEOS_CRASH_AT")
    daemon.start()
    assert _nqns(daemon) == [H1]


def test_two_daemons_on_one_machine_keep_apart(daemon: Daemon, tmp_path) -> None:
    other = Daemon(tmp_path / "second", name="n2")
    other.root.mkdir()
    daemon.start()
    other.start()
    try:
        daemon.cli("host", "add", H1, check=True)
        other.cli("host", "add", H2, check=True)
        assert _nqns(daemon) == [H1] and _nqns(other) == [H2]
        assert daemon.cli_json("status")["node_id"] != other.cli_json("status")["node_id"]
    finally:
        other.stop()


def test_cli_socket_flag_beats_the_environment(daemon: Daemon) -> None:
    daemon.start()
    nodeos = str(Path(sys.executable).parent / "nodeos")
    env = {**os.environ, "NODEOS_SOCKET": "/nonexistent.sock"}
    r = subprocess.run(
        [nodeos, "--socket", str(daemon.socket), "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
