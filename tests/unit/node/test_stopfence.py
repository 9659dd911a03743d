"""`nodeos-fence` (node/stopfence.py): which front ends a stopped daemon's node fences, read
from its real LMDB records, and how the command behaves around a live daemon. The fence itself
(configfs ANA groups, the host seeing the path go inaccessible) is proven in the lab
(tests/lab/test_failover.py, the daemon killed on the primary)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nodeos.daemon.main import NODE_DBS
from nodeos.dataplane.base import ExportInfo
from nodeos.node.stopfence import fallback_targets, fence_targets, read_volumes, settings
from nodeos.store.lmdb_store import Store

VOL = "nqn.2014-08.io.nodeos:vol:"


def _vol(name: str, replicas: int, role: str | None = None, state: str = "ready") -> dict[str, Any]:
    v: dict[str, Any] = {"name": name, "nqn": VOL + name, "replicas": replicas, "state": state}
    if role:
        v["role"] = role
    return v


def test_every_replicated_volume_is_fenced_whatever_its_role_or_state_and_single_ones_never() -> None:
    vols = [
        _vol("single", 1),
        _vol("legacy", 0),  # records from before replicas existed
        _vol("prim", 2, "primary"),
        _vol("sec", 3, "secondary"),
        _vol("promoting", 2, "secondary", state="promoting"),  # its front end may be optimized already
        {"name": "no-export-yet", "replicas": 2},
    ]
    assert fence_targets(vols) == {VOL + "prim": "prim", VOL + "sec": "sec", VOL + "promoting": "promoting"}
    assert fence_targets([]) == {}


def test_unreadable_records_fall_back_to_every_front_end_of_a_mirror_or_view() -> None:
    def exp(nqn: str, pool: str | None, dev: str | None) -> ExportInfo:
        return ExportInfo(nqn=nqn, pool_id=pool, vol_id=None, listeners=(), hosts=(), device=dev)

    exports = [
        exp(VOL + "a", None, "/dev/md/nodeos-0123"),  # a primary's mirror
        exp(VOL + "b", None, "/dev/mapper/nodeos-view-x"),  # a secondary's view
        exp(VOL + "c", "p1", "/dev/nodeos_p1/v_c"),  # a single-node volume's LV: keeps serving
        exp("nqn.2014-08.io.nodeos:rep:u:2", None, "/dev/mapper/nodeos-view-y"),  # a replica leg
    ]
    assert sorted(fallback_targets(exports)) == [VOL + "a", VOL + "b"]


def _records(node_dir: Path, vols: list[dict[str, Any]]) -> None:
    s = Store(node_dir, dbs=NODE_DBS)
    with s.write() as txn:
        for v in vols:
            txn.put("volumes", v["name"], v)
    s.close()


def test_records_are_read_from_the_real_store_and_a_corrupt_one_does_not_hide_the_others(
    tmp_path: Path,
) -> None:
    node = tmp_path / "node"
    assert read_volumes(node) == ([], [])  # a node that never stored anything
    _records(node, [_vol("a", 2, "primary"), _vol("b", 1)])
    vols, problems = read_volumes(node)
    assert sorted(v["name"] for v in vols) == ["a", "b"] and problems == []
    # A record torn on disk: reported by its key, the rest still read.
    import lmdb

    env = lmdb.open(str(node), max_dbs=32)
    with env.begin(write=True, db=env.open_db(b"volumes")) as txn:
        txn.put(b"c", b"\x93\x01\x00\xc4\x01x")
    env.close()
    vols, problems = read_volumes(node)
    assert [v["name"] for v in vols] == ["a", "b"]
    assert len(problems) == 1 and "b'c'" in problems[0] and "checksum" in problems[0]
    assert os.stat(node / "data.mdb").st_mode & 0o777 == 0o600  # the fence changed nothing


def _fence(state_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`nodeos-fence` as systemd runs it, in its own process: (exit code, log on stderr)."""
    argv = [sys.executable, "-m", "nodeos.node.stopfence", "--state-dir", str(state_dir), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_fence_without_state_or_without_replicated_volumes_does_nothing_and_succeeds(
    tmp_path: Path,
) -> None:
    r = _fence(tmp_path / "never-started", "--dataplane", "none")
    assert r.returncode == 0 and "nothing to fence" in r.stderr
    (tmp_path / "nodeosd.lock").write_text("")
    _records(tmp_path / "node", [_vol("b", 1)])
    r = _fence(tmp_path, "--dataplane", "none")
    assert r.returncode == 0 and "no replicated volume" in r.stderr


def test_fence_refuses_while_a_daemon_holds_the_state_dir(
    tmp_path: Path,
) -> None:
    _records(tmp_path / "node", [_vol("a", 2, "primary")])
    fd = os.open(tmp_path / "nodeosd.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the live daemon does
        r = _fence(tmp_path, "--dataplane", "none")
        assert r.returncode == 1 and "nodeosd runs on" in r.stderr, r.stderr
    finally:
        os.close(fd)
    # Daemon gone: the witness data plane serves nothing, so nothing to fence, no failure.
    assert _fence(tmp_path, "--dataplane", "none").returncode == 0


def test_a_config_the_daemon_would_refuse_does_not_stop_the_fence(tmp_path: Path) -> None:
    """The daemon may have died of a bad config edit: the fence still finds its state dir."""
    data = {"state_dir": str(tmp_path), "dataplane": "bogus", "lease_s": 999, "unknown_key": 1}
    s, bad = settings(data, {"state_dir": None, "dataplane": None})
    assert s == {
        "state_dir": str(tmp_path),
        "dataplane": "auto",
        "spdk_socket": "/var/tmp/spdk.sock",
        "log_level": "info",
    }
    assert bad == ["dataplane 'bogus': using 'auto'"]
    assert settings({}, {"dataplane": "none"})[0]["dataplane"] == "none"  # a flag wins
    conf = tmp_path / "nodeosd.toml"
    conf.write_text(f'state_dir = "{tmp_path}"\nlease_s = 999\nthis is not TOML')
    r = _fence(tmp_path, "--config", str(conf), "--dataplane", "none")
    assert r.returncode == 0, r.stderr
    assert "is not valid TOML" in r.stderr or "config file" in r.stderr


def test_the_fence_says_how_long_its_own_start_took() -> None:
    """The journal line carries the program's age: start-up, not the fence, is what is slow."""
    # Asked of a fresh process (this test's own process may be older than any bound: CI runs
    # for an hour): its age is its start-up so far, a few seconds, never negative.
    code = "from nodeos.node.stopfence import process_age_s; print(process_age_s())"
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    age = float(out.stdout.strip())
    assert 0 <= age <= time.monotonic() - t0 + 1.0, (age, out.stderr)


def test_an_spdk_target_that_is_not_running_serves_nothing_so_the_fence_succeeds(tmp_path: Path) -> None:
    """An SPDK image whose nvmf_tgt stopped with the daemon (or crashed, leaving its socket file):
    nothing serves, so nothing is to fence; a target that runs but is slow to answer is not that."""
    import socket

    from nodeos.dataplane.select import spdk_running

    (tmp_path / "nodeosd.lock").write_text("")
    _records(tmp_path / "node", [_vol("a", 2, "primary"), _vol("b", 3, "secondary")])
    gone = tmp_path / "gone.sock"
    r = _fence(tmp_path, "--dataplane", "spdk", "--spdk-socket", str(gone))
    assert r.returncode == 0, r.stderr
    assert "no SPDK target runs" in r.stderr and "FAILED" not in r.stderr
    # The socket file a crashed target left behind: nobody listens (connection refused).
    left = tmp_path / "left.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(left))
    s.close()
    assert not spdk_running(str(left))
    r = _fence(tmp_path, "--dataplane", "spdk", "--spdk-socket", str(left))
    assert r.returncode == 0 and "no SPDK target runs" in r.stderr, r.stderr
    # Listening but mute (its RPC thread busy): running, so the fence must try and may fail.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(tmp_path / "mute.sock"))
        mute.listen(1)
        assert spdk_running(str(tmp_path / "mute.sock"))
