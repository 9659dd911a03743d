"""Rotating the cluster secret on 3 real daemons (loopback, mutual TLS) through the `nodeos` CLI:
a member and then the leader killed -9 in the middle of a roll, the cluster converging each
time, writes committed through every member, a peer that knows only the old secret refused,
a roll refused (nothing changed) while a member is down, that member removed and, after the
next roll, joining again with a fresh token, and no secret in any daemon's log."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster import secretroll
from nodeos.cluster.localcluster import LocalCluster, LocalNode
from nodeos.cluster.tlsca import TlsFiles
from nodeos.cluster.transport import PeerTransport
from nodeos.errors import BadInput
from nodeos.store.lmdb_store import Store

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

NODEOS = str(Path(sys.executable).parent / "nodeos")
CRASH_ENV = "NODEOS_SECRET_CRASH_FILE"


def rotate(node: LocalNode, *args: str, command: str = "rotate-secret") -> subprocess.Popen[str]:
    cmd = [NODEOS, "--socket", node.socket, "cluster", command, "--json", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen[str]) -> tuple[int, Any]:
    out, err = p.communicate(timeout=120)
    return p.returncode, json.loads(out) if out.strip() else err


def keys(node: LocalNode) -> secretroll.MemberKeys:
    """The node's secrets, read from its 0600 state as an attacker with root on it would."""
    store = Store(node.root / "state" / "cluster" / "meta", dbs=["meta"])
    try:
        with store.read() as txn:
            return secretroll.keys_of(txn.get("meta", "identity"))
    finally:
        store.close()


def converged(c: LocalCluster, gen: int, timeout: float = 60.0) -> None:
    """Every member dials with `gen`, accepts nothing else, and its map says the roll is over."""
    want = {"generation": gen, "accepted": [gen], "roll": {"gen": gen, "phase": "stable"}, "problem": None}
    deadline = time.monotonic() + timeout
    seen: list[Any] = []
    while time.monotonic() < deadline:
        seen = [(c.status(n) or {}).get("secret") for n in c.nodes]
        if all(s == want for s in seen):
            return
        time.sleep(0.1)
    raise AssertionError(f"members did not converge on generation {gen}: {seen}")


def crash_and_restart(node: LocalNode, crash_file: Path) -> None:
    assert node.proc is not None
    rc = node.proc.wait(timeout=60)
    assert rc == 137, f"n{node.index} exited {rc}, not at the injected crash: {node.log_tail()}"
    crash_file.write_text("")
    node.start()


def handshake(
    node: LocalNode, target: LocalNode, cluster_id: str, gen: int, secret: bytes, ctx: ssl.SSLContext
) -> int:
    """A peer handshake with `target` claiming to be `node`, with this secret and TLS context."""

    async def main() -> int:
        t = PeerTransport(
            node.raft_id,
            cluster_id,
            secret,
            lambda *_: None,
            lambda *_: asyncio.sleep(0),
            secret_gen=gen,
            tls_client=ctx,
        )
        try:
            _, writer, _, peer = await t.dial(target.address, target.raft_id)
            writer.close()
            return peer
        finally:
            await t.close()

    return asyncio.run(main())


def dial_as(node: LocalNode, target: LocalNode, cluster_id: str, gen: int, secret: bytes) -> int:
    """Handshake with `target` claiming to be `node` (its certificate) with the given secret."""
    tls = TlsFiles(node.root / "state" / "cluster" / "tls")
    return handshake(node, target, cluster_id, gen, secret, tls.client_context())


def arm_crash_files(c: LocalCluster, tmp_path: Path) -> dict[int, Path]:
    """Per node, the file naming where its daemon crashes (empty: nowhere yet)."""
    crash = {n.raft_id: tmp_path / f"crash-n{n.raft_id}" for n in c.nodes}
    for n in c.nodes:
        crash[n.raft_id].write_text("")
        n.env[CRASH_ENV] = str(crash[n.raft_id])
    return crash


def test_rotate_the_secret_through_crashes_and_refuse_the_old_one(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, 3)
    crash = arm_crash_files(c, tmp_path)
    try:
        c.form()
        cluster_id = c.nodes[0].call("cluster.status")["cluster_id"]
        old = keys(c.nodes[0])
        assert old.dial_gen == 0 and all(keys(n) == old for n in c.nodes)

        # Bad input: exit 2, the field named, nothing changed.
        rc, out = finish(rotate(c.nodes[1], "--timeout", "0"))
        assert rc == 2 and out["error"]["field"] == "timeout", out
        assert keys(c.nodes[0]) == old

        # 1. A follower is killed -9 right after it switched to the new secret; it comes back and
        #    the roll, started on another follower (forwarded to the leader), completes.
        leader = c.leader()
        follower, victim = [n for n in c.nodes if n is not leader]
        crash[victim.raft_id].write_text("switched")
        p = rotate(follower)
        crash_and_restart(victim, crash[victim.raft_id])
        rc, out = finish(p)
        assert rc == 0 and out == {"generation": 1, "members": [1, 2, 3]}, out
        converged(c, 1)
        k1 = keys(c.nodes[0])
        assert k1.secrets.keys() == {1} and all(keys(n) == k1 for n in c.nodes) and k1.dial != old.dial

        # 2. The leader is killed -9 once the switch is committed: the next leader finishes.
        leader = c.leader()
        crash[leader.raft_id].write_text("leader-switched")
        p = rotate(leader)
        crash_and_restart(leader, crash[leader.raft_id])
        rc, out = finish(p)
        assert rc != 0  # the node answering the command died: the operator sees it failed
        converged(c, 2)
        k2 = keys(c.nodes[0])
        assert all(keys(n) == k2 for n in c.nodes) and k2.dial not in (old.dial, k1.dial)

        # Every member still commits writes.
        for n in c.nodes:
            n.call("cluster.kv.put", {"key": f"after-{n.index}", "value": "ok"}, timeout=30)
        assert c.nodes[0].call("cluster.kv.get", {"key": "after-3"})["value"] == "ok"

        # A peer that knows only an old secret is refused (with a clear error); the new one works.
        n1, n3 = c.by_id(1), c.by_id(3)
        for gen, secret in ((0, old.dial), (1, k1.dial)):
            with pytest.raises(BadInput) as exc:
                dial_as(n3, n1, cluster_id, gen, secret)
            assert exc.value.field == "secret" and "rotated away" in exc.value.message
        assert dial_as(n3, n1, cluster_id, 2, k2.dial) == 1

        # 3. A member that is down: the roll is refused, naming it; nothing changed.
        n3.kill()
        rc, out = finish(rotate(n1, "--timeout", "3"))
        assert (
            rc == 1 and "node 3" in out["error"]["message"] and "nothing changed" in out["error"]["message"]
        )
        assert keys(n1) == k2 and keys(c.by_id(2)) == k2

        # 4. It is gone for good: removed, the roll goes on without it. When it comes back its peers
        #    refuse it and its status says what to do (no hang); it joins again with a fresh token.
        c.leader(among=[n1, c.by_id(2)])
        assert n1.call("cluster.remove", {"node_id": 3}, timeout=30) == {"removed": 3}
        rc, out = finish(rotate(n1))
        assert rc == 0 and out == {"generation": 3, "members": [1, 2]}, out
        n3.start()
        deadline = time.monotonic() + 30
        while "missed a rotation" not in str((c.status(n3) or {}).get("secret")):
            assert time.monotonic() < deadline, c.status(n3)
            time.sleep(0.2)
        token = n1.call("cluster.token", {})["token"]
        n3.call("cluster.join", {"address": n1.address, "token": token, "node_id": 3}, timeout=60)
        c.wait_voters(3)
        converged(c, 3)
        k3 = keys(n1)
        assert keys(n3) == k3

        # No secret, in any form, in any daemon's log.
        for n in c.nodes:
            text = (n.root / "nodeosd.log").read_bytes()
            assert b"dialling with generation 2" in text  # the roll is in this log, its secrets not
            for s in (old.dial, k1.dial, k2.dial, k3.dial):
                for form in (s, s.hex().encode(), base64.b64encode(s), base64.urlsafe_b64encode(s)):
                    assert form.rstrip(b"=") not in text, f"a secret is in n{n.index}'s log"
                assert repr(s).encode()[2:-1] not in text
    finally:
        c.stop()
