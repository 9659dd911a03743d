"""`nodeos host add --tls` and `nodeos host update` (issue 28): what the console sends, and bad
input refused before anything is sent (exit 2, the field named, the key never echoed). A fake
daemon client records every call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeos import tlskey
from nodeos.cli import node as node_cli
from nodeos.cli.main import cli

KEY = tlskey.make_key(b"t" * 32)
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
def fake_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeClient.calls, FakeClient.replies = [], {}
    monkeypatch.setattr(node_cli, "Client", FakeClient)


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args), input=stdin)
    return r.exit_code, r.stdout, r.stderr


def test_a_bare_tls_asks_for_required_and_shows_the_made_key_once() -> None:
    FakeClient.replies["host.add"] = {"nqn": HOST, "tls": "required", "tls_key": KEY}
    code, out, _ = run("host", "add", HOST, "--tls")
    assert code == 0 and KEY in out and "shown once" in out
    assert FakeClient.calls == [("host.add", {"nqn": HOST, "dhchap_secret": None, "tls": "required"})]


def test_a_key_file_and_a_policy(tmp_path: Path) -> None:
    f = tmp_path / "k"
    f.write_text(KEY + "\n")
    FakeClient.replies["host.add"] = {"nqn": HOST, "tls": "allowed"}
    code, out, _ = run("host", "add", HOST, "--tls", "allowed", "--tls-key-file", str(f))
    assert code == 0 and KEY not in out
    assert FakeClient.calls == [
        ("host.add", {"nqn": HOST, "dhchap_secret": None, "tls": "allowed", "tls_key": KEY})
    ]


def test_update_sends_what_changes() -> None:
    FakeClient.replies["host.update"] = {"nqn": HOST, "tls": "required", "changed": True, "tls_key": KEY}
    code, out, _ = run("host", "update", HOST, "--new-tls-key")
    assert code == 0 and KEY in out
    assert FakeClient.calls == [("host.update", {"nqn": HOST, "new_tls_key": True})]


BAD = [
    (["host", "add", HOST, "--tls", "sometimes"], None),  # click's own choice check
    (["host", "add", HOST, "--tls-key-file", "{bad}"], "tls_key_file"),
    (["host", "add", HOST, "--tls-key-file", "{missing}"], "tls_key_file"),
    (["host", "add", HOST, "--tls", "off", "--tls-key-file", "{good}"], "tls"),
    (["host", "add", HOST, "nqn.2014-08.com.example:gpu2", "--tls"], "tls"),
    (["host", "update", HOST], "tls"),
    (["host", "update", HOST, "--tls-key-file", "{good}", "--new-tls-key"], "tls_key_file"),
    (["host", "update", "not-an-nqn", "--tls"], "host"),
]


@pytest.mark.parametrize(("args", "field"), BAD)
def test_bad_input_is_refused_before_anything_is_sent(
    tmp_path: Path, args: list[str], field: str | None
) -> None:
    (tmp_path / "good").write_text(KEY)
    (tmp_path / "bad").write_text(KEY.replace(":01:", ":02:"))  # wrong length for SHA-384
    files = {"good": str(tmp_path / "good"), "bad": str(tmp_path / "bad"), "missing": str(tmp_path / "no")}
    argv = [a.format(**files) for a in args]
    code, out, err = run(*argv, "--json")
    assert code == 2, (out, err)
    if field is not None:
        assert json.loads(out)["error"]["field"] == field
    assert KEY not in out + err
    assert FakeClient.calls == []
