"""Probes of a careless operator against a real daemon without a data plane (issue 25): names
that do not exist, bad timeouts, contradictory labels, a failed compare-and-set, secrets on the
command line. What the operator sees: the exit code, the JSON error, the state unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeos import validate
from nodeos.rpc.client import Client

from .conftest import Daemon

pytestmark = pytest.mark.process

HOST = "nqn.2014-08.com.example:gpu1"


def error(r: Any, code: int) -> dict[str, Any]:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    return dict(json.loads(r.stdout)["error"])


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["volume", "delete", "NOSUCH"], "name"),
        (["volume", "resize", "NOSUCH", "--size", "2GiB"], "name"),
        (["volume", "snapshot", "NOSUCH", "s1"], "name"),
        (["volume", "clone", "NOSUCH", "c1"], "snapshot"),
        (["volume", "publish", "NOSUCH", "p1"], "snapshot"),
        (["volume", "unpublish", "NOSUCH"], "name"),
        (["volume", "grant", "NOSUCH", "--host", HOST], "name"),
        (["volume", "revoke", "NOSUCH", "--host", HOST], "name"),
        (["pool", "delete", "NOSUCH"], "name"),
    ],
)
def test_a_name_that_does_not_exist_is_not_found_before_no_data_plane(
    shared_daemon: Daemon, argv: list[str], field: str
) -> None:
    err = error(shared_daemon.cli(*argv, "--json"), 2)
    assert err["code"] == "not_found" and err["field"] == field and "NOSUCH" in err["message"]


def test_an_existing_cluster_without_storage_still_says_so_for_a_create(shared_daemon: Daemon) -> None:
    err = error(shared_daemon.cli("volume", "create", "v1", "--size", "1GiB", "--json"), 1)
    assert err["code"] == "not_supported" and err["field"] == "dataplane"


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_volume_timeout_is_bad_input_and_creates_nothing(shared_daemon: Daemon, value: str) -> None:
    err = error(
        shared_daemon.cli("volume", "create", "v1", "--size", "1GiB", "--timeout", value, "--json"), 2
    )
    assert err["field"] == "timeout" and "at most" in err["allowed"]
    assert shared_daemon.cli_json("volume", "list") == []


def test_a_failed_cas_exits_1_with_and_without_json(shared_daemon: Daemon) -> None:
    r = shared_daemon.cli("cluster", "kv", "cas", "nokey", "x", "--expect", "y")
    assert r.returncode == 1 and "nothing changed" in r.stderr
    r = shared_daemon.cli("cluster", "kv", "cas", "nokey", "x", "--expect", "y", "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["succeeded"] is False and out["value"] is None
    assert shared_daemon.cli_json("cluster", "kv", "get", "nokey")["value"] is None


def _labels(d: Daemon) -> dict[str, str]:
    return dict(d.cli_json("node", "show", "n1")["labels"])


@pytest.mark.parametrize("labels", [["rack=a", "rack-"], ["rack-", "rack=b"]])
def test_contradictory_label_changes_are_refused_and_change_nothing(
    shared_daemon: Daemon, labels: list[str]
) -> None:
    shared_daemon.cli("node", "label", "n1", "rack=r0", check=True)
    err = error(shared_daemon.cli("node", "label", "n1", "switch=s1", *labels, "--json"), 2)
    assert err["field"] == "labels" and "'rack'" in err["message"]
    assert _labels(shared_daemon) == {"rack": "r0"}


def test_the_api_refuses_setting_and_removing_one_label_too(shared_daemon: Daemon) -> None:
    from nodeos.errors import BadInput

    shared_daemon.cli("node", "label", "n1", "rack=r0", check=True)
    with pytest.raises(BadInput) as e:
        Client(str(shared_daemon.socket)).call(
            "node.label", {"node": "n1", "set": {"rack": "r9"}, "remove": ["rack"]}
        )
    assert e.value.field == "labels" and "'rack'" in e.value.message
    assert _labels(shared_daemon) == {"rack": "r0"}


def test_dhchap_secret_on_the_command_line_warns_and_a_file_does_not(
    shared_daemon: Daemon, tmp_path: Path
) -> None:
    secret = validate.make_dhchap_secret(b"q" * 32)
    r = shared_daemon.cli("host", "add", HOST, "--dhchap-secret", secret, "--json")
    assert r.returncode == 0, r.stderr
    assert "a secret on the command line is visible to every user (ps)" in r.stderr
    f = tmp_path / "secret"
    f.write_text(secret + "\n")
    other = HOST + "-2"
    r = shared_daemon.cli("host", "add", other, "--dhchap-secret-file", str(f), "--json")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    hosts = {h["nqn"]: h for h in shared_daemon.cli_json("host", "list")}
    assert hosts[HOST]["dhchap"] and hosts[other]["dhchap"]
    err = error(
        shared_daemon.cli("host", "add", HOST + "-3", "--dhchap-secret-file", str(f) + ".nope", "--json"), 2
    )
    assert err["field"] == "dhchap_secret_file"
    assert HOST + "-3" not in {h["nqn"] for h in shared_daemon.cli_json("host", "list")}
