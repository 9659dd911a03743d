"""Single-use join tokens and the short-lived token of `cluster init`, through the real console
and daemons (issue 25, probe 11): two nodes racing to join with one single-use token, exactly
one gets in and the other is told the token was already used (exit 2, nothing changed on it);
the token `init` prints says it is short-lived, and an expired one is refused as such."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from nodeos.cluster.localcluster import LocalNode
from nodeos.cluster.token import INIT_TTL_S
from tests.process.cluster_cli import ok, started_nodes

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

NODEOS = str(Path(sys.executable).parent / "nodeos")


def cmd(node: LocalNode, *args: str, json_out: bool = True) -> list[str]:
    return [NODEOS, "--socket", node.socket, "cluster", *args, *(["--json"] if json_out else [])]


def cli(node: LocalNode, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd(node, *args), capture_output=True, text=True, timeout=120, input=stdin)


@pytest.fixture
def nodes(tmp_path: Path) -> Any:
    yield from started_nodes(tmp_path)


def test_two_nodes_racing_with_a_single_use_token_exactly_one_joins(nodes: Any, tmp_path: Path) -> None:
    n1, n2, n3 = nodes(1), nodes(2), nodes(3)
    ok(cli(n1, "init", "--node-id", "1"))
    tok = ok(cli(n1, "token", "--uses", "1"))
    assert tok["uses"] == 1
    token_file = tmp_path / "token"
    token_file.write_text(tok["token"])
    token_file.chmod(0o600)
    racers = {
        n.raft_id: subprocess.Popen(
            cmd(n, "join", n1.address, "--token-file", str(token_file), "--node-id", str(n.raft_id)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (n2, n3)
    }
    done = {nid: (p.wait(timeout=120), *p.communicate()) for nid, p in racers.items()}
    winners = [nid for nid, (rc, _, _) in done.items() if rc == 0]
    losers = [nid for nid, (rc, _, _) in done.items() if rc != 0]
    assert len(winners) == 1 and len(losers) == 1, done
    rc, out, _ = done[losers[0]]
    assert rc == 2, done
    err = json.loads(out)["error"]
    assert err["field"] == "token" and "token already used" in err["message"], err
    # Nothing changed on the loser: still its own cluster of one; the cluster has the winner.
    loser = n2 if losers[0] == 2 else n3
    assert ok(cli(loser, "status"))["solo"] is True
    assert sorted(m["node_id"] for m in ok(cli(n1, "status"))["members"]) == [1, winners[0]]
    listed = {t["token_id"]: t for t in ok(cli(n1, "token", "--list"))["tokens"]}
    assert listed[tok["token_id"]]["used_by"] == winners and listed[tok["token_id"]]["uses"] == 1


def test_the_init_token_is_short_lived_and_an_expired_token_is_refused_as_such(nodes: Any) -> None:
    n1, n2 = nodes(1), nodes(2)
    r = subprocess.run(cmd(n1, "init", "--node-id", "1", json_out=False), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "short-lived: valid for 15 minutes" in r.stdout, r.stdout
    tok = ok(cli(n1, "token"))  # any number of joins until it expires, as before
    left = tok["expires"] - time.time()
    assert tok["uses"] is None and 3000 < left <= 3600
    assert INIT_TTL_S == 900

    # The same token with its expiry in the past: refused, exit 2, n2 unchanged.
    raw = msgpack.unpackb(base64.urlsafe_b64decode(tok["token"] + "=" * (-len(tok["token"]) % 4)))
    raw["exp"] = time.time() - 10
    stale = base64.urlsafe_b64encode(msgpack.packb(raw, use_bin_type=True)).decode().rstrip("=")
    r = cli(n2, "join", n1.address, "--token-file", "-", "--node-id", "2", stdin=stale)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert err["field"] == "token" and "expired" in err["message"], err
    assert ok(cli(n2, "status"))["solo"] is True
