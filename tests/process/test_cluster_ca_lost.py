"""The cluster CA survives the loss of the node that holds it, on real daemons (loopback) through the
`nodeos` CLI: init on n1, join n2 and n3, kill n1 for good. `cluster status` and `nodeos status`
say where the CA is and that its node is down, with the command to run; no join token can be
issued. `nodeos cluster remove 1` on n2 moves the CA to n2 (a new CA, its key made there); n4
joins with a token of n2, writes go through every member, and the old CA is trusted no more. And
the CA's node lost right after the switch of a roll it drove: removing it finishes that roll and
makes a CA on the member that ran the removal."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster import tlsca
from nodeos.cluster.localcluster import LocalCluster, LocalNode
from nodeos.cluster.token import decode_token
from nodeos.errors import BadInput, NodeosError
from tests.process.test_cluster_ca_rotation import dial, rotate_ca, tls_dir
from tests.process.test_cluster_secret_rotation import NODEOS, arm_crash_files

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def cli(node: LocalNode, *args: str) -> tuple[int, Any]:
    p = subprocess.run(
        [NODEOS, "--socket", node.socket, *args, "--json"], capture_output=True, text=True, timeout=120
    )
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else p.stderr


def human(node: LocalNode, *args: str) -> str:
    p = subprocess.run([NODEOS, "--socket", node.socket, *args], capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.2)


def ca_of(node: LocalNode) -> dict[str, Any]:
    return dict(node.call("cluster.status", timeout=10)["ca"])


def test_the_ca_moves_off_a_lost_node_and_joins_work_again(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, 4)
    n1, n2, n3, n4 = c.nodes
    try:
        for n in c.nodes:
            n.start()
        token = n1.call("cluster.init", {"node_id": 1})["token"]
        for n in (n2, n3):
            n.call("cluster.join", {"address": n1.address, "token": token, "node_id": n.raft_id}, timeout=60)
        c.wait_voters(3)
        assert ca_of(n3) == {
            "generation": 0,
            "roll": {"gen": 0, "phase": "stable"},
            "holder": 1,
            "problem": None,
        }
        assert "ca       generation 0   on node 1" in human(n3, "cluster", "status")
        old_ca = (tls_dir(n1) / "ca.pem").read_bytes()
        old3 = (tls_dir(n3) / "node.pem", tls_dir(n3) / "node.key")
        was3 = tmp_path / "was3.pem", tmp_path / "was3.key"
        for src, dst in zip(old3, was3, strict=True):
            dst.write_bytes(src.read_bytes())
        cluster_id = n2.call("cluster.status")["cluster_id"]

        # n1 is lost for good. The survivors say where the CA is, that its node is down, and what to run.
        n1.kill()
        wait_for("a leader among n2, n3", lambda: c.leader(among=[n2, n3]))
        problem = wait_for("the CA's node called down", lambda: ca_of(n2)["problem"])
        assert "node 1, which holds the cluster CA, is down" in problem and "cluster remove 1" in problem
        assert "cluster remove 1" in human(n2, "cluster", "status")
        assert "WARNING   cluster: node 1, which holds the cluster CA, is down" in human(n2, "status")
        rc, out = cli(n2, "cluster", "token")
        assert rc == 2 and out["error"]["field"] == "cluster" and "node 1" in out["error"]["message"], out

        # Bad input exits 2 naming the field; nothing changes.
        rc, out = cli(n2, "cluster", "rotate-ca", "--timeout", "0")
        assert rc == 2 and out["error"]["field"] == "timeout", out
        rc, out = cli(n2, "cluster", "remove", "2")
        assert rc == 2 and out["error"]["field"] == "node_id", out
        assert ca_of(n2)["holder"] == 1 and (tls_dir(n2) / "ca.pem").read_bytes() == old_ca

        # Removing the lost CA's node makes a new CA on the member that ran the removal.
        rc, out = cli(n2, "cluster", "remove", "1")
        assert rc == 0 and out["removed"] == 1, out
        assert out["ca"] == {"moved": True, "holder": 2, "generation": 1}, out
        want = {"generation": 1, "roll": {"gen": 1, "phase": "stable"}, "holder": 2, "problem": None}
        for n in (n2, n3):
            wait_for(f"n{n.index} on the new CA", lambda n=n: ca_of(n) == want)
        assert (tls_dir(n2) / "ca.key").exists() and not (tls_dir(n3) / "ca.key").exists()
        new_ca = (tls_dir(n2) / "ca.pem").read_bytes()
        assert new_ca != old_ca and (tls_dir(n3) / "ca.pem").read_bytes() == new_ca
        assert "ca       generation 1   on node 2" in human(n3, "cluster", "status")

        # Joins work again: a token of n2 (carrying the new CA), n4 joins at n2's address.
        rc, out = cli(n2, "cluster", "token")
        assert rc == 0, out
        assert decode_token(out["token"]).ca == new_ca
        n4.call("cluster.join", {"address": n2.address, "token": out["token"], "node_id": 4}, timeout=60)
        wait_for(
            "n4 a voter",
            lambda: any(
                m["node_id"] == 4 and m["raft"] == "voter"
                for m in (c.status(c.leader(among=[n2, n3])) or {})["members"]
            ),
        )
        assert tlsca.issued_by((tls_dir(n4) / "node.pem").read_bytes(), new_ca)
        for n in (n2, n3, n4):
            n.call("cluster.kv.put", {"key": f"after-{n.index}", "value": "ok"}, timeout=30)
        assert n4.call("cluster.kv.get", {"key": "after-2"}, timeout=30)["value"] == "ok"

        # The old CA is trusted no more: n3's old certificate is refused, its new one accepted, and a
        # dialer trusting only the old CA does not trust the cluster.
        now3 = (tls_dir(n3) / "node.pem", tls_dir(n3) / "node.key")
        assert dial(n3, n2, cluster_id, tlsca.client_context(new_ca, *now3)) == 2
        with pytest.raises((OSError, NodeosError)):
            dial(n3, n2, cluster_id, tlsca.client_context(new_ca, *was3))
        with pytest.raises(BadInput) as exc:
            dial(n3, n2, cluster_id, tlsca.client_context(old_ca, *was3))
        assert exc.value.field == "cluster"
    finally:
        c.stop()


def test_a_roll_whose_node_is_lost_at_its_switch_is_finished_and_the_ca_made_anew(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, 3)
    crash = arm_crash_files(c, tmp_path)
    n1, n2, n3 = c.nodes
    try:
        c.form()
        crash[1].write_text("ca-node-switched")  # n1 dies -9 once the switch to its new CA is committed
        rc, _ = rotate_ca(n1)
        assert rc != 0 and n1.proc is not None and n1.proc.wait(timeout=60) == 137
        n1.kill()
        wait_for("a leader among n2, n3", lambda: c.leader(among=[n2, n3]))
        switch = {"gen": 1, "phase": "switch"}
        wait_for("the switch on n2", lambda: ca_of(n2)["roll"] == switch and ca_of(n2)["holder"] == 1)

        rc, out = cli(n2, "cluster", "remove", "1")
        assert rc == 0 and out["ca"] == {"moved": True, "holder": 2, "generation": 2}, out
        want = {"generation": 2, "roll": {"gen": 2, "phase": "stable"}, "holder": 2, "problem": None}
        for n in (n2, n3):
            wait_for(f"n{n.index} on the new CA", lambda n=n: ca_of(n) == want)
        new_ca = (tls_dir(n2) / "ca.pem").read_bytes()
        assert tlsca.issued_by((tls_dir(n3) / "node.pem").read_bytes(), new_ca)
        rc, out = cli(n2, "cluster", "token")
        assert rc == 0, out
        got = decode_token(out["token"]).ca
        assert got == new_ca, (tlsca.subject_cns(got), tlsca.subject_cns(new_ca))  # no extra roll
        n3.call("cluster.kv.put", {"key": "after", "value": "ok"}, timeout=30)
    finally:
        c.stop()
