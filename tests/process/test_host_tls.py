"""NVMe/TCP TLS keys of hosts on real nodeosd processes (issue 28): a key the appliance makes is
answered once, through a follower's console, and is never on any disk, log or later output in
plain text; every member opens it (the path its export specs take); a key another host has is
refused (exit 2, field tls_key, nothing changed); a new key replaces the old one."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeos import tlskey
from nodeos.cluster.datakey import PREFIX
from nodeos.cluster.features import LEVEL
from nodeos.cluster.localcluster import LocalNode

from .test_cluster_membership import cli_json, voters, wait_status
from .test_cluster_membership import nodes as nodes  # the fixture
from .test_host_secrets_sealed import files_holding

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]
NODEOS = str(Path(sys.executable).parent / "nodeos")
H1 = "nqn.2014-08.com.example:gpu-1"
H2 = "nqn.2014-08.com.example:gpu-2"


def run(node: LocalNode, *args: str) -> tuple[int, str]:
    r = subprocess.run(
        [NODEOS, "--socket", node.socket, *args, "--json"], capture_output=True, text=True, timeout=120
    )
    return r.returncode, r.stdout + r.stderr


def tls_digest(node: LocalNode, host: str) -> Any:
    return (node.call("cluster.test.host_keys").get(host) or {}).get("tls_sha256")


def wait_digest(node: LocalNode, host: str, want: str) -> None:
    import time

    deadline = time.monotonic() + 30
    while tls_digest(node, host) != want:
        assert time.monotonic() < deadline, f"node {node.raft_id} did not open {host}'s TLS key"
        time.sleep(0.1)


def test_a_made_tls_key_is_shown_once_sealed_everywhere_and_unique(nodes: Any, tmp_path: Path) -> None:
    n1, n2 = nodes(1), nodes(2)
    token = cli_json(n1, "init", "--node-id", "1")["token"]
    cli_json(n2, "join", n1.address, "--token", token, "--node-id", "2")
    wait_status(n1, lambda s: voters(s) == [1, 2] and s["leader"] is not None, 60)
    leader = wait_status(n1, lambda s: s["leader"] is not None)["leader"]
    follower = n2 if leader == 1 else n1

    rc, out = run(follower, "host", "add", H1, "--tls")
    assert rc == 0, out
    made = json.loads(out)
    key = made["tls_key"]
    assert made["tls"] == "required" and tlskey.check_key(key) == key
    digest = hashlib.sha256(key.encode()).hexdigest()
    for n in (n1, n2):
        wait_digest(n, H1, digest)

    # The same key for a second host: refused, naming the field, nothing registered.
    f = tmp_path / "k"
    f.write_text(key + "\n")
    f.chmod(0o600)
    rc, dup = run(n1, "host", "add", H2, "--tls", "allowed", "--tls-key-file", str(f))
    assert rc == 2 and json.loads(dup)["error"]["field"] == "tls_key", dup
    rc, listed = run(n2, "host", "list")
    assert rc == 0 and [(h["nqn"], h["tls"]) for h in json.loads(listed)] == [(H1, "required")]

    # A new key: answered once, opened everywhere, the old one gone from every member's view.
    rc, upd = run(n2, "host", "update", H1, "--new-tls-key")
    assert rc == 0, upd
    new = json.loads(upd)["tls_key"]
    assert new != key and json.loads(upd)["changed"] is True
    for n in (n1, n2):
        wait_digest(n, H1, hashlib.sha256(new.encode()).hexdigest())
    rc, show = run(n1, "host", "list")
    outputs = listed + show + dup

    for secret in (key, new):
        raw = base64.b64decode(secret.split(":")[2])[:32]
        needles = [secret.encode(), secret.split(":")[2].encode(), raw]
        for n in (n1, n2):
            assert files_holding(n.root / "state", needles) == [], f"node {n.raft_id} keeps a TLS key"
            assert files_holding(n.root, needles[:2]) == []  # nor in its log
        assert secret not in outputs
    for n in (n1, n2):
        assert files_holding(n.root / "state" / "cluster" / "raft", [PREFIX.encode()]), n.raft_id

    # The host's PSK derivation (older nvme-cli: compat), through a follower: a cluster this
    # release made starts at the feature level that has the command; a bad word is refused
    # naming the field and the allowed values, nothing changed.
    rc, bad = run(follower, "host", "update", H1, "--tls-derivation", "legacy")
    assert rc == 2 and "standard" in bad and "compat" in bad, bad
    rc, upd = run(follower, "host", "update", H1, "--tls-derivation", "compat")
    assert rc == 0 and json.loads(upd)["tls_derivation"] == "compat", upd
    rc, listed = run(follower, "host", "list")
    assert rc == 0 and json.loads(listed)[0]["tls_derivation"] == "compat", listed
    rc, st = run(n1, "cluster", "status")
    assert rc == 0 and json.loads(st)["features"]["feature_level"] == LEVEL, st
