"""Join tokens through the real CLI and daemons: a token is not the cluster secret, is read
from a file or stdin (never needed on the command line), and a revoked one is refused and
changes nothing."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import pytest

from nodeos.cluster.localcluster import LocalNode
from tests.process.cluster_cli import cli, ok, started_nodes

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def cluster_secret(node: LocalNode) -> bytes:
    """Read from the member's own LMDB (a second reader is allowed while the daemon runs)."""
    env = lmdb.open(str(node.root / "state" / "cluster" / "meta"), max_dbs=4, readonly=True, lock=True)
    try:
        with env.begin(db=env.open_db(b"meta", create=False)) as txn:
            raw = txn.get(b"identity")
    finally:
        env.close()
    _, _, payload = msgpack.unpackb(raw)
    return bytes(msgpack.unpackb(payload, raw=False)["secret"])


@pytest.fixture
def nodes(tmp_path: Path) -> Any:
    yield from started_nodes(tmp_path)


def test_tokens_are_not_the_secret_come_from_files_and_can_be_revoked(nodes: Any, tmp_path: Path) -> None:
    n1, n2, n3 = nodes(1), nodes(2), nodes(3)
    init = ok(cli(n1, "init", "--node-id", "1"))
    secret = cluster_secret(n1)
    raw = base64.urlsafe_b64decode(init["token"] + "==")
    assert secret not in raw and secret.hex() not in init["token"]

    token_file = tmp_path / "token"
    token_file.write_text(init["token"] + "\n")
    ok(cli(n2, "join", n1.address, "--token-file", str(token_file), "--node-id", "2"))
    assert cluster_secret(n2) == secret  # handed over, wrapped, once the join committed
    # Mutual TLS: n2 got a certificate for its own key; the CA's key stayed on n1.
    tls1, tls2 = n1.root / "state" / "cluster" / "tls", n2.root / "state" / "cluster" / "tls"
    assert (tls1 / "ca.key").exists() and not (tls2 / "ca.key").exists()
    assert (tls2 / "node.key").exists() and (tls2 / "node.pem").exists()
    assert (tls2 / "ca.pem").read_bytes() == (tls1 / "ca.pem").read_bytes()

    # A second token, revoked before use: refused as bad input; n3 stays outside.
    t2 = ok(cli(n1, "token", "--ttl", "600"))
    listed = ok(cli(n1, "token", "--list"))["tokens"]
    assert t2["token_id"] in [t["token_id"] for t in listed] and "key" not in json.dumps(listed)
    ok(cli(n1, "token", "--revoke", t2["token_id"]))
    r = cli(n3, "join", n1.address, "--token-file", "-", "--node-id", "3", stdin=t2["token"])
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert err["field"] == "token" and "revoked" in err["message"]
    alone = ok(cli(n3, "status"))
    assert alone["solo"] is True and alone["cluster_id"] != ok(cli(n1, "status"))["cluster_id"]
    assert [m["node_id"] for m in ok(cli(n1, "status"))["members"]] == [1, 2]

    # A fresh token on stdin works for n3.
    t3 = ok(cli(n1, "token"))
    ok(cli(n3, "join", n1.address, "--token-file", "-", "--node-id", "3", stdin=t3["token"]))
    assert cluster_secret(n3) == secret


def test_a_join_token_does_not_let_a_stranger_act_as_a_member(nodes: Any) -> None:
    """A token's session may only ask to join: e.g. no forwarded writes, no Raft messages."""
    import asyncio

    from nodeos.cluster.token import decode_token
    from nodeos.cluster.transport import PeerTransport
    from nodeos.errors import BadInput, NodeosError

    n1 = nodes(1)
    tok = decode_token(ok(cli(n1, "init", "--node-id", "1"))["token"])

    async def main() -> None:
        async def no_request(frm: int, method: str, params: dict[str, Any]) -> Any:
            raise AssertionError("unexpected")

        from nodeos.cluster.tlsca import client_context

        plain = PeerTransport(9, tok.cluster_id, tok.key, lambda f, m: None, no_request, join_id=tok.token_id)
        try:  # without TLS nothing gets through
            with pytest.raises(NodeosError):
                await plain.request_address(n1.address, "cluster.join", {"node_id": 9}, timeout=10)
        finally:
            await plain.close()
        t = PeerTransport(
            9,
            tok.cluster_id,
            tok.key,
            lambda f, m: None,
            no_request,
            join_id=tok.token_id,
            tls_client=client_context(tok.ca),
        )
        try:
            with pytest.raises(BadInput) as exc:
                await t.request_address(
                    n1.address, "cluster.fwd", {"method": "command", "params": {}}, timeout=10
                )
            assert exc.value.field == "method"
        finally:
            await t.close()

    asyncio.run(main())
