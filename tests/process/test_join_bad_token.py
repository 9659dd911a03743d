"""A join token with an altered key (issue 25, probe 7), through the real console and daemons:
bad input (exit 2, field token, "the token is not valid for this cluster"), nothing changed on
either node, and the genuine token still joins."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

from nodeos.cluster.localcluster import LocalNode

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

NODEOS = str(Path(sys.executable).parent / "nodeos")


def cli(node: LocalNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODEOS, "--socket", node.socket, "cluster", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(r: subprocess.CompletedProcess[str]) -> Any:
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout)


def altered(token: str) -> str:
    tok = msgpack.unpackb(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)), raw=False)
    tok["key"] = bytes([tok["key"][0] ^ 1]) + tok["key"][1:]
    return base64.urlsafe_b64encode(msgpack.packb(tok, use_bin_type=True)).decode().rstrip("=")


@pytest.fixture
def two(tmp_path: Path) -> Any:
    n1, n2 = LocalNode(tmp_path, 1), LocalNode(tmp_path, 2)
    try:
        n1.start()
        n2.start()
        yield n1, n2
    finally:
        n1.kill()
        n2.kill()


def test_a_token_with_an_altered_key_is_bad_input_and_changes_nothing(two: Any, tmp_path: Path) -> None:
    n1, n2 = two
    token = ok(cli(n1, "init", "--node-id", "1"))["token"]
    before = ok(cli(n2, "status"))
    bad = tmp_path / "bad-token"
    bad.write_text(altered(token) + "\n")
    r = cli(n2, "join", n1.address, "--token-file", str(bad), "--node-id", "2")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert json.loads(r.stdout)["error"] == {
        "code": "bad_input",
        "field": "token",
        "message": "the token is not valid for this cluster",
    }
    assert ok(cli(n2, "status"))["cluster_id"] == before["cluster_id"]
    assert [m["node_id"] for m in ok(cli(n1, "status"))["members"]] == [1]
    good = tmp_path / "token"
    good.write_text(token + "\n")
    ok(cli(n2, "join", n1.address, "--token-file", str(good), "--node-id", "2"))


def test_a_token_with_a_damaged_ca_is_bad_input_and_changes_nothing(two: Any, tmp_path: Path) -> None:
    """Before, this one failed in ssl inside the join: exit 1, blaming the node's state dir."""
    n1, n2 = two
    token = ok(cli(n1, "init", "--node-id", "1"))["token"]
    before = ok(cli(n2, "status"))
    tok = msgpack.unpackb(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)), raw=False)
    tok["ca"] = tok["ca"].replace(b"-----BEGIN CERTIFICATE-----\n", b"-----BEGIN CERTIFICATE-----\nAA")
    bad = tmp_path / "bad-token"
    bad.write_text(base64.urlsafe_b64encode(msgpack.packb(tok, use_bin_type=True)).decode() + "\n")
    r = cli(n2, "join", n1.address, "--token-file", str(bad), "--node-id", "2")
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert err["code"] == "bad_input" and err["field"] == "token" and "damaged" in err["message"], err
    assert ok(cli(n2, "status"))["cluster_id"] == before["cluster_id"]
    assert [m["node_id"] for m in ok(cli(n1, "status"))["members"]] == [1]
