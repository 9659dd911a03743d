"""DH-HMAC-CHAP host secrets on real nodeosd processes: what the disk holds, and who can open it.

A host added with a secret through a follower's console: no file under any member's state dir
(Raft log, snapshots, LMDB, TLS material: raw bytes) holds the secret, nor does any log or
--json output; the sealed form is in the Raft log. A member that joins later gets the data key
in its join and opens the secret through the node service's own opening of its map (the path
its export specs take; loopback nodes have no data plane to look at), and still does after the
cluster secret is rotated.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.datakey import PREFIX
from nodeos.cluster.localcluster import LocalNode
from nodeos.validate import make_dhchap_secret

from .test_cluster_membership import cli_json, voters, wait_status
from .test_cluster_membership import nodes as nodes  # the fixture

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]
NODEOS = str(Path(sys.executable).parent / "nodeos")
H1 = "nqn.2014-08.com.example:gpu-1"


def run(node: LocalNode, *args: str) -> tuple[int, str]:
    r = subprocess.run(
        [NODEOS, "--socket", node.socket, *args, "--json"], capture_output=True, text=True, timeout=120
    )
    return r.returncode, r.stdout + r.stderr


def files_holding(root: Path, needles: list[bytes]) -> list[str]:
    """Every file under `root` whose raw bytes hold any needle (read in overlapping chunks:
    LMDB files may be large and sparse)."""
    found = []
    width = max(len(n) for n in needles)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_socket()):
        with path.open("rb") as f:
            tail = b""
            while chunk := f.read(1 << 20):
                buf = tail + chunk
                if any(n in buf for n in needles):
                    found.append(str(path.relative_to(root)))
                    break
                tail = buf[-width:]
    return found


def opened(node: LocalNode) -> dict[str, Any]:
    return node.call("cluster.test.host_keys")  # type: ignore[no-any-return]


def wait_opened(node: LocalNode, digest: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    got: dict[str, Any] = {}
    while time.monotonic() < deadline:
        got = opened(node).get(H1) or {}
        if got.get("sha256") == digest:
            return got
        time.sleep(0.1)
    raise AssertionError(f"node {node.raft_id} did not open the host secret: {got}")


def test_host_secrets_are_sealed_on_every_disk_and_open_on_a_later_member(nodes: Any, tmp_path: Path) -> None:
    n1, n2 = nodes(1), nodes(2)
    token = cli_json(n1, "init", "--node-id", "1")["token"]
    cli_json(n2, "join", n1.address, "--token", token, "--node-id", "2")
    wait_status(n1, lambda s: voters(s) == [1, 2] and s["leader"] is not None, 60)

    key = os.urandom(32)
    secret = make_dhchap_secret(key)
    digest = hashlib.sha256(secret.encode()).hexdigest()
    secret_file = tmp_path / "secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    leader = wait_status(n1, lambda s: s["leader"] is not None)["leader"]
    follower = n2 if leader == 1 else n1
    rc, out = run(follower, "host", "add", H1, "--dhchap-secret-file", str(secret_file))
    assert rc == 0 and json.loads(out)["dhchap"] is True, out

    # A member joining later gets the data key in its join and opens the secret with it.
    n3 = nodes(3)
    token3 = cli_json(n1, "token")["token"]
    cli_json(n3, "join", n1.address, "--token", token3, "--node-id", "3")
    wait_status(n1, lambda s: voters(s) == [1, 2, 3], 60)
    for n in (n1, n2, n3):
        assert wait_opened(n, digest)["error"] is None

    # What an operator or a script sees: that the host has a secret, never the secret.
    rc, listed = run(n3, "host", "list")
    assert rc == 0 and json.loads(listed)[0]["dhchap"] is True
    rc, status = run(n3, "cluster", "status")
    assert rc == 0 and json.loads(status)["data_key"]["current"] is not None
    outputs = listed + status + out

    # Rotating the cluster secret leaves the data key as it is.
    rc, rot = run(n2, "cluster", "rotate-secret")
    assert rc == 0, rot
    for n in (n1, n2, n3):
        assert wait_opened(n, digest)["error"] is None

    b64_key = secret.split(":")[2]
    needles = [secret.encode(), b64_key.encode(), key, base64.b64encode(key)]
    for n in (n1, n2, n3):
        state = n.root / "state"
        assert files_holding(state, needles) == [], f"node {n.raft_id} keeps the secret in plain text"
        # The sealed form is what the Raft log holds (and shows this search reads those files).
        assert files_holding(state / "cluster" / "raft", [PREFIX.encode()]), n.raft_id
        assert files_holding(n.root, [secret.encode(), b64_key.encode()]) == []  # nor in its log
    assert secret not in outputs and b64_key not in outputs
