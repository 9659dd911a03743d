"""Rotating the cluster CA on 3 real daemons (loopback) through the `nodeos` CLI: bad input refused,
a member killed -9 right after it presents its new certificate, the cluster converging, writes
through every member, afterwards a peer certificate of the old CA refused (and the old CA not
trusting anyone) while the new one works, the CA's node killed -9 in the middle of a second roll,
finishing it once it is back, and a roll driven by another member moving the CA there (the old
CA's key dropped, its node issuing no join token)."""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster import tlsca
from nodeos.cluster.localcluster import LocalCluster, LocalNode
from nodeos.cluster.token import decode_token
from nodeos.errors import BadInput, NodeosError
from tests.process.test_cluster_secret_rotation import (
    arm_crash_files,
    crash_and_restart,
    finish,
    handshake,
    keys,
    rotate,
)

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def rotate_ca(node: LocalNode, *args: str) -> tuple[int, Any]:
    return finish(rotate(node, *args, command="rotate-ca"))


def wait_ca(c: LocalCluster, node: LocalNode, want: dict[str, Any], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (c.status(node) or {}).get("ca") != want:
        assert time.monotonic() < deadline, c.status(node)
        time.sleep(0.1)


def tls_dir(node: LocalNode) -> Path:
    return node.root / "state" / "cluster" / "tls"


def dial(node: LocalNode, target: LocalNode, cluster_id: str, ctx: ssl.SSLContext) -> int:
    """A handshake with `target` as `node` (its current secret) with the given TLS context."""
    k = keys(node)
    return handshake(node, target, cluster_id, k.dial_gen, k.dial, ctx)


def test_rotate_the_ca_through_a_crash_and_refuse_the_old_one(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, 3)
    crash = arm_crash_files(c, tmp_path)
    try:
        c.form()
        n1, n2, n3 = c.nodes
        cluster_id = n1.call("cluster.status")["cluster_id"]
        old = tmp_path / "old"
        old.mkdir()
        for f in ("ca.pem", "node.key", "node.pem"):
            (old / f).write_bytes((tls_dir(n3) / f).read_bytes())

        # Bad input exits 2. Nothing changes.
        rc, out = rotate_ca(n1, "--timeout", "0")
        assert rc == 2 and out["error"]["field"] == "timeout", out
        assert (tls_dir(n3) / "ca.pem").read_bytes() == (old / "ca.pem").read_bytes()

        # A member is killed -9 right after it presents its new certificate; it comes back.
        crash[3].write_text("ca-switched")
        p = rotate(n1, command="rotate-ca")
        crash_and_restart(n3, crash[3])
        rc, out = finish(p)
        assert rc == 0 and out == {"generation": 1, "members": [1, 2, 3]}, out
        # Rolls back to back (over the API: no console start-up in between): the members may not
        # have applied the end of one when the next begins.
        for gen in (2, 3):
            assert n1.call("cluster.ca.rotate", {}, timeout=60) == {"generation": gen, "members": [1, 2, 3]}

        want = {"generation": 3, "roll": {"gen": 3, "phase": "stable"}, "holder": 1, "problem": None}
        for n in c.nodes:
            wait_ca(c, n, want)
            files = sorted(p.name for p in tls_dir(n).iterdir())
            assert files == (["ca.key"] if n is n1 else []) + ["ca.pem", "node.key", "node.pem"]
            n.call("cluster.kv.put", {"key": f"after-ca-{n.index}", "value": "ok"}, timeout=30)
        new_ca = (tls_dir(n1) / "ca.pem").read_bytes()
        assert new_ca != (old / "ca.pem").read_bytes()
        assert tlsca.issued_by((tls_dir(n3) / "node.pem").read_bytes(), new_ca)

        # n3's new certificate is accepted; its old one (of the old CA) is refused; a dialer that
        # trusts only the old CA does not trust the cluster any more.
        now3 = (tls_dir(n3) / "node.pem", tls_dir(n3) / "node.key")
        was3 = (old / "node.pem", old / "node.key")
        assert dial(n3, n1, cluster_id, tlsca.client_context(new_ca, *now3)) == 1
        with pytest.raises((OSError, ssl.SSLError, NodeosError)):
            dial(n3, n1, cluster_id, tlsca.client_context(new_ca, *was3))
        with pytest.raises(BadInput) as exc:
            dial(n3, n1, cluster_id, tlsca.client_context((old / "ca.pem").read_bytes(), *was3))
        assert exc.value.field == "cluster"

        # New join tokens carry the new CA.
        assert decode_token(n1.call("cluster.token", {})["token"]).ca == new_ca

        # The CA's node is killed -9 once the switch is committed: back, it finishes the roll.
        crash[1].write_text("ca-node-switched")
        p = rotate(n1, command="rotate-ca")
        crash_and_restart(n1, crash[1])
        rc, _ = finish(p)
        assert rc != 0  # the node answering the command died
        want2 = {"generation": 4, "roll": {"gen": 4, "phase": "stable"}, "holder": 1, "problem": None}
        for n in c.nodes:
            wait_ca(c, n, want2)
        newer_ca = (tls_dir(n1) / "ca.pem").read_bytes()
        assert all(tlsca.issued_by((tls_dir(n) / "node.pem").read_bytes(), newer_ca) for n in c.nodes)
        assert not (tls_dir(n1) / "ca-new.key").exists()
        n2.call("cluster.kv.put", {"key": "after-ca-2", "value": "ok"}, timeout=30)

        # Any member rotates the CA; the new CA then lives there and the old CA's key is dropped.
        rc, out = rotate_ca(n2)
        assert rc == 0 and out == {"generation": 5, "members": [1, 2, 3]}, out
        want3 = {"generation": 5, "roll": {"gen": 5, "phase": "stable"}, "holder": 2, "problem": None}
        for n in c.nodes:
            wait_ca(c, n, want3)
            files = sorted(p.name for p in tls_dir(n).iterdir())
            assert files == (["ca.key"] if n is n2 else []) + ["ca.pem", "node.key", "node.pem"]
        rc, out = finish(rotate(n1, command="token"))
        assert rc == 2 and out["error"]["field"] == "cluster" and "node 2" in out["error"]["message"], out
        assert decode_token(n2.call("cluster.token", {})["token"]).ca == (tls_dir(n1) / "ca.pem").read_bytes()
        n3.call("cluster.kv.put", {"key": "after-ca-3", "value": "ok"}, timeout=30)
    finally:
        c.stop()
