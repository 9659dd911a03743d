"""The HTTPS REST endpoint of a real nodeosd (`--rest-listen`): the API's methods served from
their definitions with bearer tokens and roles, TLS with the cluster CA, an OpenAPI 3.1
document, the console's error codes; wrong, missing, revoked and read-only tokens change
nothing, and no token reaches the log."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Daemon

pytestmark = pytest.mark.process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("rest"), extra=["--rest-listen", f"127.0.0.1:{_free_port()}"])
    d.start()
    try:
        yield d
    finally:
        d.stop()


def https(
    port: int,
    ca: Path,
    verb: str,
    path: str,
    token: str | None = None,
    body: Any = None,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    """One request to /api/v1 + path, TLS trusting `ca` (status, decoded JSON answer)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False  # the node's certificate names its member id, not 127.0.0.1
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    try:
        conn.request(verb, "/api/v1" + path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def call(
    d: Daemon, verb: str, path: str, token: str | None = None, body: Any = None, raw: bytes | None = None
) -> tuple[int, Any]:
    port = int(d.extra[1].rsplit(":", 1)[1])
    return https(port, d.state_dir / "cluster" / "tls" / "ca.pem", verb, path, token, body, raw)


def make_token(d: Daemon, role: str) -> str:
    return str(d.cli_json("auth", "token", "create", "--role", role)["token"])


def test_the_openapi_document_lists_every_route(rest: Daemon) -> None:
    status, doc = call(rest, "GET", "/openapi.json")
    assert status == 200 and doc["openapi"] == "3.1.0"
    assert {"/volume/create", "/status", "/auth/token/create", "/cluster/kv/put"} <= set(doc["paths"])
    assert "/cluster/test/fault" not in doc["paths"]  # test hooks are not served


def test_without_a_valid_token_nothing_is_served(rest: Daemon) -> None:
    for token in (None, "nonsense", "nodeos_0123456789abcdef_" + "A" * 43):
        status, body = call(rest, "POST", "/cluster/kv/put", token, {"key": "k", "value": "x"})
        assert status == 401 and body["error"]["code"] == "unauthorized", body
    assert rest.cli_json("cluster", "kv", "get", "k")["value"] is None


def test_a_read_only_token_reads_and_may_not_write(rest: Daemon) -> None:
    ro = make_token(rest, "read-only")
    status, body = call(rest, "GET", "/status", ro)
    assert status == 200 and body["node_name"] == "n1"
    status, body = call(rest, "POST", "/cluster/kv/put", ro, {"key": "k", "value": "x"})
    assert status == 403 and body["error"]["field"] == "authorization", body
    assert rest.cli_json("cluster", "kv", "get", "k")["value"] is None


def test_an_admin_token_writes_and_errors_keep_the_console_codes(rest: Daemon) -> None:
    admin = make_token(rest, "admin")
    status, body = call(rest, "POST", "/cluster/kv/put", admin, {"key": "k2", "value": "x"})
    assert status == 200 and body["value"] == "x"
    assert rest.cli_json("cluster", "kv", "get", "k2")["value"] == "x"
    status, body = call(rest, "POST", "/volume/create", admin, {"name": "v1", "size": "1GiB", "spread": "x"})
    assert status == 400 and body["error"]["field"] == "spread"
    assert body["error"]["allowed"] == ["node", "rack", "switch"]
    status, body = call(rest, "POST", "/volume/show", admin, {"name": "nosuch"})
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = call(rest, "POST", "/volume/create", admin, raw=b"{not json")
    assert status == 400 and body["error"]["field"] == "body"
    status, body = call(rest, "POST", "/no/such/method", admin, {})
    assert status == 404
    status, body = call(rest, "GET", "/volume/create", admin)
    assert status == 405
    assert rest.cli_json("volume", "list") == []


def test_a_revoked_token_is_refused_and_no_token_is_logged(rest: Daemon) -> None:
    admin = make_token(rest, "admin")
    assert call(rest, "GET", "/volume/list", admin)[0] == 200
    listed = rest.cli_json("auth", "token", "list")["tokens"]
    token_id = admin.split("_")[1]
    assert {"token_id": token_id, "role": "admin", "revoked": False} in listed
    assert rest.cli_json("auth", "token", "revoke", token_id)["revoked"] == token_id
    assert call(rest, "GET", "/volume/list", admin)[0] == 401
    r = rest.cli("auth", "token", "revoke", token_id, "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "not_found"
    assert admin.split("_", 2)[2] not in Path(rest.log).read_text()
    status = rest.cli_json("status")["rest"]
    assert status["refused"]["unauthorized"] >= 1 and status["error"] is None


def test_off_by_default(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    d.start()
    try:
        assert d.cli_json("status")["rest"] is None
        assert "rest " not in d.cli("status", check=True).stdout
    finally:
        d.stop()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"\r", "body"),  # whitespace alone is no JSON text (it was taken as no parameters)
        (b'{"key": "K", "value": ' + b"[" * 3000 + b"]" * 3000 + b"}", "body"),  # too deep: was a 500
        (b'{"key": "K", "value": 1180591620717411303424}', "value"),  # wider than 64 bits: was a 500
        (b'{"key": "K", "value": "x", "extra": [[], [-18446744073709551617]]}', "extra"),  # ignored field too
        (b'{"key": "K", "value": "x", "": {"a": 18446744073709551616}}', "body"),  # a field named ""
    ],
)
def test_a_body_the_daemon_cannot_carry_is_bad_input_naming_where(
    rest: Daemon, raw: bytes, field: str
) -> None:
    """Found by schemathesis through a follower (issue 26): such bodies reached the dispatcher and
    broke where the request was packed to go on (5xx; a follower dropped its leader connection)."""
    admin = make_token(rest, "admin")
    key = f"wide-{len(raw)}"
    status, body = call(rest, "POST", "/cluster/kv/put", admin, raw=raw.replace(b'"K"', f'"{key}"'.encode()))
    assert status == 400 and body["error"]["code"] == "bad_input" and body["error"]["field"] == field, body
    assert rest.cli_json("cluster", "kv", "get", key)["value"] is None
    status, body = call(rest, "POST", "/cluster/kv/put", admin, {"key": key, "value": 2**64 - 1})
    assert status == 200 and body["value"] == 2**64 - 1  # the widest that fits still goes through
