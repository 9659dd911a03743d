"""`nodeos cluster upgrade` with three real daemons on loopback and a real signed bundle (RAUC,
mksquashfs and an openssl key, as tests/process/test_update_bundle.py makes them).

What is real here: the console and its exit codes, the bundle's checks on the node that holds
it, the leader's checks and order, the map's record, the bundle copied to another member over
the authenticated peer transport and checked there against its SHA-256, and that member's own
`nodeos node update`. What this machine lacks is A/B slots: that update fails ("no A/B
slots"), and the upgrade must stop naming the node and the reason while the cluster keeps
serving; resume and abort then work from the map. Rebooting into a written slot is the lab's
(tests/lab/test_update_ab.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.localcluster import LocalNode
from nodeos.update import build as ub
from nodeos.update.node_job import KEEP_FRESH_S, bundle_path
from nodeos.update.verify import node_arch
from tests.process.cluster_cli import cli, ok

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

MISSING = [t for t in ("rauc", "mksquashfs", "openssl") if shutil.which(t) is None]
if MISSING:
    pytestmark.append(pytest.mark.skip(reason=f"{', '.join(MISSING)} not installed (images/bootstrap.sh)"))
if Path("/etc/rauc/system.conf").exists():
    pytestmark.append(pytest.mark.skip(reason="this machine has RAUC slots: an upgrade would write one"))

NEWER = "99.0.0"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("bundles")
    signing = ub.lab_key(d / "keys")
    payload = d / "payload"
    payload.mkdir()
    (payload / "rootfs.ext4").write_bytes(bytes(range(256)) * 12288)  # 3 MiB: several 1 MiB chunks
    files = {"rootfs.ext4": payload / "rootfs.ext4"}

    def make(name: str, version: str) -> Path:
        return ub.make_bundle(
            files,
            d / f"{name}.raucb",
            version=version,
            arch=node_arch(),
            build="t",
            metadata={},
            signing=signing,
        )

    good = make("good", NEWER)
    tampered = d / "tampered.raucb"
    data = bytearray(good.read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    return {"keyring": signing.cert, "good": good, "tampered": tampered, "older": make("older", "0.0.1")}


@pytest.fixture
def three(tmp_path: Path, bundles: dict[str, Any]) -> Iterator[list[LocalNode]]:
    conf = tmp_path / "nodeosd.toml"
    conf.write_text(f'update_keyring = "{bundles["keyring"]}"\n')
    nodes = [LocalNode(tmp_path, i) for i in (1, 2, 3)]
    try:
        for n in nodes:
            n.args = ["--config", str(conf)]
            n.start()
        token = ok(cli(nodes[0], "init", "--node-id", "1"))["token"]
        for n in nodes[1:]:
            ok(cli(n, "join", nodes[0].address, "--token", token, "--node-id", str(n.raft_id)))
        for n in nodes:
            n.call("node.label", {"node": f"n{n.index}", "set": {"rack": "abc"[n.index - 1]}}, timeout=30)
        yield nodes
    finally:
        for n in nodes:
            n.kill()


def status(n: LocalNode) -> dict[str, Any]:
    return ok(cli(n, "upgrade", "--status"))["upgrade"]


def wait_state(n: LocalNode, want: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    up: dict[str, Any] = {}
    while time.monotonic() < deadline:
        up = status(n) or {}
        if up.get("state") == want:
            return up
        time.sleep(0.5)
    raise AssertionError(f"upgrade not {want} within {timeout} s: {up}")


def test_bad_bundles_are_refused_and_nothing_starts(three: list[LocalNode], bundles: dict[str, Any]) -> None:
    n1 = three[0]
    for kind, code in (("tampered", "bundle_refused"), ("older", "bundle_refused")):
        r = cli(n1, "upgrade", str(bundles[kind]))
        assert r.returncode == 2, (kind, r.stdout, r.stderr)
        assert code in r.stdout, r.stdout
    r = cli(n1, "upgrade", "/no/such/bundle")
    assert r.returncode == 2 and "bundle" in r.stdout
    r = cli(n1, "upgrade")
    assert r.returncode == 2 and "BUNDLE" in r.stdout
    assert status(n1) is None  # nothing started


def test_dry_run_shows_the_order_and_changes_nothing(three: list[LocalNode], bundles: dict[str, Any]) -> None:
    n2 = three[1]
    out = ok(cli(n2, "upgrade", str(bundles["good"]), "--dry-run"))
    assert out["dry_run"] is True and out["ok"] is True and out["problems"] == []
    assert out["version"] == NEWER and out["bundle"]["version"] == NEWER
    names = [d["name"] for d in out["domains"]]
    assert sorted(names) == ["rack=a", "rack=b", "rack=c"]
    leader = ok(cli(n2, "status"))["leader"]
    assert names[-1] == f"rack={'abc'[leader - 1]}"  # the leader's rack last
    assert status(n2) is None
    sha = hashlib.sha256(bundles["good"].read_bytes()).hexdigest()
    assert not bundle_path(n2.root / "state", sha).exists()  # a dry run keeps no copy


def test_an_upgrade_stops_naming_the_node_whose_slot_cannot_be_written(
    three: list[LocalNode], bundles: dict[str, Any]
) -> None:
    n1, n2, n3 = three
    sha = hashlib.sha256(bundles["good"].read_bytes()).hexdigest()
    out = ok(cli(n3, "upgrade", str(bundles["good"])))
    assert out["upgrade"]["state"] == "running" and out["upgrade"]["version"] == NEWER
    r = cli(n1, "upgrade", str(bundles["good"]))  # a second one while this one runs
    assert r.returncode == 1 and "is running" in r.stdout
    up = wait_state(n1, "stopped")
    first = out["domains"][0]["nodes"][0]  # the first domain's node got the update first
    assert up["reason"].startswith(f"node {first}: ") and "no A/B slots" in up["reason"], up
    # It copied the bundle from n3 over the peer transport and checked it.
    holder = next(n for n in three if f"n{n.index}" == first)
    if holder is not n3:
        copied = bundle_path(holder.root / "state", sha)
        assert copied.exists() and hashlib.sha256(copied.read_bytes()).hexdigest() == sha
        assert copied.stat().st_mode & 0o077 == 0  # root-only
    # The cluster keeps serving, and says what happened.
    ok(cli(n2, "kv", "put", "after", "1"))
    events = [e for e in n1.call("events.list", {}, timeout=30)["events"] if e["kind"] == "upgrade"]
    assert any("stopped" in e["message"] and first in e["message"] for e in events), events
    # Before it was handed the update, its domain was released (feature level 6): its replicas
    # out of every in-sync set, their legs cut by the primaries; stopped, the release ended (its
    # replicas are taken back while the upgrade waits for an operator).
    said = [e["message"].split(": ", 1)[1] for e in events]
    dom = out["domains"][0]["name"]
    released_at = said.index(f"{dom}: primaries handed over; its replicas released for its update")
    assert said.index(f"{dom}: released legs cut by every primary") > released_at, said
    assert up["step"] in ("update", "rejoin") and up["released"] == [], up
    # Resume goes back to it (and stops again the same way); abort ends it.
    ok(cli(n2, "upgrade", "--resume"))
    wait_state(n1, "stopped")
    ok(cli(n2, "upgrade", "--abort"))
    assert status(n3)["state"] == "aborted"
    # Aborted, nobody needs the bundle any more: every node drops the copy it kept (the state
    # partition is small), within the tidy interval.
    kept = [bundle_path(n.root / "state", sha) for n in three]
    assert bundle_path(n3.root / "state", sha).exists()
    for k in kept:  # older than the grace a fresh copy gets (an upgrade about to start)
        if k.exists():
            os.utime(k, (time.time() - KEEP_FRESH_S - 1,) * 2)
    deadline = time.monotonic() + 90
    while any(k.exists() for k in kept) and time.monotonic() < deadline:
        time.sleep(1)
    assert not any(k.exists() for k in kept), kept
    r = cli(n2, "upgrade", "--pause")
    assert r.returncode == 2 and "aborted" in r.stdout


def test_a_leader_killed_mid_way_leaves_the_upgrade_to_the_next_one(
    three: list[LocalNode], bundles: dict[str, Any]
) -> None:
    """The procedure is in the map: the leader SIGKILLed right after the start (and restarted),
    the next leader drives it on to the same end (here the stop at the first node, which has no
    slots)."""
    n1 = three[0]
    leader_id = ok(cli(n1, "status"))["leader"]
    leader = next(n for n in three if n.raft_id == leader_id)
    src = next(n for n in three if n is not leader)
    out = ok(cli(src, "upgrade", str(bundles["good"])))
    first = out["domains"][0]["nodes"][0]
    assert first != f"n{leader.index}"  # the leader's domain comes last
    leader.kill()
    leader.start()  # back before it could be called down: the upgrade goes on, not stops for it
    rest = [n for n in three if n is not leader]
    up = wait_state(rest[0], "stopped", timeout=180)
    if up["reason"] == f"node n{leader.index} is down: {out['domains'][0]['name']} is not taken down too":
        # Its restart outlasted its lease (a loaded machine): called down, and the upgrade took
        # no domain down meanwhile. Up again, a resume goes on to the same end.
        deadline = time.monotonic() + 120
        show = {"node": f"n{leader.index}"}
        while str(rest[0].call("node.show", show, timeout=30).get("health")).startswith("down"):
            assert time.monotonic() < deadline, "the restarted node never came back up"
            time.sleep(1)
        ok(cli(rest[0], "upgrade", "--resume"))
        up = wait_state(rest[0], "stopped", timeout=180)
    assert up["reason"].startswith(f"node {first}: ") and "no A/B slots" in up["reason"], up
    new_leader = ok(cli(rest[0], "status"))["leader"]
    assert new_leader != leader_id
