"""Console input checked before anything is sent (issue 25, probes 5, 6, 8, 9): timeouts, label
changes, DH-HMAC-CHAP secrets; and the exit code of a failed compare-and-set, with and without
--json. A fake daemon client records every call: bad input must make none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeos import validate
from nodeos.cli import cluster as cluster_cli
from nodeos.cli import node as node_cli
from nodeos.cli.main import cli
from nodeos.cli.secret_input import WARNING

SECRET = validate.make_dhchap_secret(b"k" * 32)
HOST = "nqn.2014-08.com.example:gpu1"


class FakeClient:
    calls: list[tuple[str, Any]] = []
    replies: dict[str, Any] = {}

    def __init__(self, socket_path: str, timeout_s: float | None = None) -> None:
        pass

    def call(self, method: str, params: Any = None, progress: str | None = None) -> Any:
        FakeClient.calls.append((method, params))
        return FakeClient.replies.get(method, {})


@pytest.fixture(autouse=True)
def fake_daemon(monkeypatch: pytest.MonkeyPatch) -> type[FakeClient]:
    FakeClient.calls, FakeClient.replies = [], {}
    monkeypatch.setattr(node_cli, "Client", FakeClient)
    monkeypatch.setattr(cluster_cli, "Client", FakeClient)
    return FakeClient


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args), input=stdin)
    return r.exit_code, r.stdout, r.stderr


# --- probe 6: every timeout, wait and interval ------------------------------------------------

TIMED = [
    ["volume", "create", "v1", "--size", "1GiB", "--timeout"],
    ["volume", "publish", "snap", "pub", "--timeout"],
    ["node", "drain", "n1", "--timeout"],
    ["cluster", "kv", "get", "k", "--timeout"],
    ["cluster", "kv", "put", "k", "v", "--timeout"],
    ["cluster", "kv", "cas", "k", "v", "--expect-absent", "--timeout"],
    ["cluster", "rotate-secret", "--timeout"],
    ["cluster", "rotate-ca", "--timeout"],
    ["net", "watch", "--config", "/nonexistent/net.toml", "--interval"],
]


BAD_TIMES = ["-1", "0", "nan", "inf", "-inf", "1e9", "soon"]


# `volume create --timeout 0` is no error: it returns once the create is taken (below).
@pytest.mark.parametrize(
    ("argv", "value"),
    [(a, v) for a in TIMED for v in BAD_TIMES if not (a[:2] == ["volume", "create"] and v == "0")],
    ids=lambda x: " ".join(x[:3]) if isinstance(x, list) else x,
)
def test_a_timeout_that_is_no_positive_finite_number_is_refused_before_a_call(
    argv: list[str], value: str
) -> None:
    code, out, _ = run(*argv, value, "--json")
    assert code == 2, out
    err = json.loads(out)["error"]
    assert err["code"] == "bad_input" and err["field"] == argv[-1][2:]
    assert "a number of seconds" in err["allowed"] and "at most" in err["allowed"]
    assert FakeClient.calls == []


def test_without_json_the_timeout_error_says_the_range() -> None:
    code, out, err = run("volume", "create", "v1", "--size", "1GiB", "--timeout", "nan")
    assert code == 2 and out == ""
    assert "--timeout" in err and "at least 0 and at most 604800" in err
    assert FakeClient.calls == []


def test_a_good_timeout_still_creates() -> None:
    FakeClient.replies["volume.show"] = {"name": "v1", "state": "ready"}
    code, out, _ = run("volume", "create", "v1", "--size", "1GiB", "--timeout", "2.5", "--json")
    assert code == 0, out
    assert [m for m, _ in FakeClient.calls] == ["volume.create", "volume.show"]


def test_a_create_with_timeout_0_returns_once_taken_without_waiting() -> None:
    FakeClient.replies["volume.show"] = {"name": "v1", "state": "creating"}
    code, out, _ = run("volume", "create", "v1", "--size", "1GiB", "--timeout", "0", "--json")
    assert code == 0, out
    assert json.loads(out)["state"] == "creating"
    assert [m for m, _ in FakeClient.calls] == ["volume.create", "volume.show"]


# --- probe 5: a failed compare-and-set exits 1 either way ---------------------------------------


def test_a_failed_cas_exits_1_with_and_without_json() -> None:
    FakeClient.replies["cluster.kv.cas"] = {"key": "nokey", "succeeded": False, "value": None}
    code, out, err = run("cluster", "kv", "cas", "nokey", "x", "--expect", "y")
    assert code == 1 and "nokey holds (absent)" in err
    code, out, _ = run("cluster", "kv", "cas", "nokey", "x", "--expect", "y", "--json")
    assert code == 1
    assert json.loads(out) == {"key": "nokey", "succeeded": False, "value": None}


# --- probe 8: one change per label key ---------------------------------------------------------


@pytest.mark.parametrize("labels", [["rack=a", "rack-"], ["rack-", "rack=b"], ["rack=a", "rack=b"]])
def test_contradictory_changes_to_one_label_are_refused_naming_the_key(labels: list[str]) -> None:
    code, out, _ = run("node", "label", "n1", "switch=s1", *labels, "--json")
    assert code == 2
    err = json.loads(out)["error"]
    assert err["field"] == "labels" and "'rack'" in err["message"]
    assert FakeClient.calls == []


def test_repeating_the_same_change_is_not_a_contradiction() -> None:
    FakeClient.replies["node.label"] = {"labels": {"rack": "a"}}
    code, out, _ = run("node", "label", "n1", "rack=a", "rack=a", "--json")
    assert code == 0, out
    assert FakeClient.calls == [("node.label", {"node": "n1", "set": {"rack": "a"}, "remove": []})]


# --- probe 9: DH-HMAC-CHAP secrets from a file, a warning on the command line -----------------


def test_a_secret_on_the_command_line_warns_as_a_token_does() -> None:
    FakeClient.replies["host.add"] = {"dhchap": True}
    code, _, err = run("host", "add", HOST, "--dhchap-secret", SECRET)
    assert code == 0
    assert WARNING in err and "visible to every user (ps)" in err
    assert FakeClient.calls == [("host.add", {"nqn": HOST, "dhchap_secret": SECRET})]


def test_a_secret_file_loses_its_trailing_newline_and_gives_no_warning(tmp_path: Path) -> None:
    f = tmp_path / "secret"
    f.write_text(SECRET + "\n")
    code, _, err = run("host", "add", HOST, "--dhchap-secret-file", str(f))
    assert code == 0 and "warning" not in err
    assert FakeClient.calls == [("host.add", {"nqn": HOST, "dhchap_secret": SECRET})]


def test_a_secret_from_stdin() -> None:
    code, _, _ = run("host", "add", HOST, "--dhchap-secret-file", "-", stdin=SECRET + "\n")
    assert code == 0
    assert FakeClient.calls == [("host.add", {"nqn": HOST, "dhchap_secret": SECRET})]


@pytest.mark.parametrize("what", ["missing", "directory", "garbage"])
def test_an_unusable_secret_file_is_bad_input_and_nothing_is_sent(tmp_path: Path, what: str) -> None:
    f = tmp_path / "secret"
    if what == "directory":
        f.mkdir()
    elif what == "garbage":
        f.write_bytes(b"\xff\xfe not a secret")
    code, out, _ = run("host", "add", HOST, "--dhchap-secret-file", str(f), "--json")
    assert code == 2
    err = json.loads(out)["error"]
    assert err["field"] == "dhchap_secret_file" and err["code"] == "bad_input"
    assert SECRET not in out
    assert FakeClient.calls == []


def test_secret_and_secret_file_together_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "secret"
    f.write_text(SECRET)
    code, out, _ = run(
        "host", "add", HOST, "--dhchap-secret", SECRET, "--dhchap-secret-file", str(f), "--json"
    )
    assert code == 2 and json.loads(out)["error"]["field"] == "dhchap_secret_file"
    assert FakeClient.calls == []
