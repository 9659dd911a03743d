"""A node whose Raft member or state has failed says so, refuses work with its own error
codes, withdraws the systemd watchdog, and comes back by itself once the cause is gone.

Real faults: a full file system (a small tmpfs under the state dir) and records corrupted in
the real LMDB files between runs."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from nodeos.cluster.localcluster import free_port
from tests.process.conftest import NODEOS, Daemon

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def run_json(d: Daemon, *args: str) -> tuple[int, Any]:
    r = d.cli(*args, "--json")
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached within {timeout}s; last {last}")


def wait_notify_status(d: Daemon, prefix: str, timeout: float = 10.0) -> None:
    """Wait for a systemd STATUS= line starting with `prefix`."""
    assert d.notify is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(m.get("STATUS", "").startswith(prefix) for m in d.notify.messages):
            return
        with contextlib.suppress(AssertionError):  # receives whatever arrives meanwhile
            d.notify.wait_for("NO-SUCH-KEY", timeout=0.3)
    raise AssertionError(f"no STATUS={prefix}... within {timeout}s: {d.notify.messages}")


def cluster_status(d: Daemon) -> dict[str, Any]:
    rc, st = run_json(d, "status")
    assert rc == 0, st
    return st


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """The daemon's state dir on an 8 MiB tmpfs of its own: a disk that really fills up."""
    state = tmp_path / "state"
    state.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(state)])
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)])


def fill(fs: Path) -> Path:
    """Fill the file system completely; return the filler file."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 512):  # big chunks, then the last bytes
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    probe = fs / "probe"
    with pytest.raises(OSError) as e:
        probe.write_bytes(b"\0" * 4096)
    assert e.value.errno == errno.ENOSPC
    return filler


def test_full_disk_stops_the_member_it_says_so_and_comes_back(daemon: Daemon, small_fs: Path) -> None:
    daemon.extra = ["--peer-listen", f"127.0.0.1:{free_port()}"]
    daemon.env = {"WATCHDOG_USEC": "1000000"}  # pings every 0.5 s while healthy
    daemon.start()
    assert daemon.notify is not None
    daemon.cli("cluster", "init", "--json", check=True)
    daemon.cli("cluster", "kv", "put", "k", "v1", "--json", check=True)
    daemon.notify.wait_for("WATCHDOG", "1", timeout=5)

    filler = fill(small_fs)
    # LMDB reuses its free pages first: write until a commit needs a page the disk cannot give.
    for i in range(200):
        rc, out = run_json(daemon, "cluster", "kv", "put", f"k{i}", "x" * 4000)
        if rc != 0:
            break
    assert rc == 1, "the disk never filled"
    # The write reached the failing commit: it may or may not be on disk, and the code says so.
    assert out["error"]["code"] in ("unknown_outcome", "not_leader"), out

    st = wait_until(
        "status shows the failure", lambda: (s := cluster_status(daemon))["cluster"]["role"] == "failed" and s
    )
    assert st["health"]["ok"] is False
    assert "no_space" in st["health"]["failures"]["cluster"]
    assert "no_space" in st["cluster"]["failure"]
    human = daemon.cli("status", check=True).stdout
    assert "FAILED" in human and "no_space" in human
    wait_notify_status(daemon, "FAILED")
    # Watchdog withdrawn: no ping while FAILED lasts (at least the 1 s before the first restart,
    # two ping intervals; the member may then win an election on the pages LMDB freed).
    n = daemon.notify
    assert n is not None
    i = next(k for k, m in enumerate(n.messages) if m.get("STATUS", "").startswith("FAILED"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3 and not any(
        "STATUS" in m and not m["STATUS"].startswith("FAILED") for m in n.messages[i + 1 :]
    ):
        with contextlib.suppress(AssertionError):
            n.wait_for("NO-SUCH-KEY", timeout=0.2)
    window = n.messages[i + 1 :]
    end = next((k for k, m in enumerate(window) if "STATUS" in m), len(window))
    assert "watchdog withdrawn" in daemon.log.read_text()
    assert not any(m.get("WATCHDOG") == "1" for m in window[:end]), n.messages

    # A failed node refuses with "nothing was done" (unless it is back already, see above).
    rc, out = run_json(daemon, "cluster", "kv", "put", "k", "v3", "--timeout", "2")
    assert rc == 0 or out["error"]["code"] in ("not_leader", "unknown_outcome"), out

    filler.unlink()
    wait_until(
        "member back",
        lambda: (s := cluster_status(daemon))["health"]["ok"] and s["cluster"]["role"] == "leader",
        90,
    )
    daemon.notify.wait_for("WATCHDOG", "1", timeout=10)
    daemon.cli("cluster", "kv", "put", "k", "v4", "--json", check=True)
    rc, out = run_json(daemon, "cluster", "kv", "get", "k")
    assert rc == 0 and out["value"] == "v4"
    assert cluster_status(daemon)["health"] == {"ok": True, "failures": {}}


def corrupt(env_dir: Path, db: bytes, key: bytes) -> None:
    env = lmdb.open(str(env_dir), max_dbs=32, subdir=True)
    try:
        handle = env.open_db(db, create=False)
        with env.begin(write=True) as txn:
            assert txn.get(key, db=handle) is not None, f"no {key!r} in {db!r}"
            txn.put(key, b"\x93\x01\x00\xc4\x03bad", db=handle)  # right envelope, wrong checksum
    finally:
        env.close()


def corrupt_raft_log(path: Path) -> None:
    """Flip a byte inside the log file's first record (its base: hard state, snapshot)."""
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack_from(">I", data, 0)
    data[8 + length // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_raft_record_at_start_is_reported_not_served(daemon: Daemon) -> None:
    daemon.extra = ["--peer-listen", f"127.0.0.1:{free_port()}"]
    daemon.start()
    daemon.cli("cluster", "init", "--json", check=True)
    assert daemon.terminate() == 0
    corrupt_raft_log(daemon.state_dir / "cluster" / "raft" / "log")

    daemon.start()  # the daemon itself stays up: status must be able to say what is wrong
    st = wait_until("failure reported", lambda: (s := cluster_status(daemon))["health"]["failures"] and s)
    assert st["cluster"]["role"] == "failed"
    assert "corrupt_record" in st["cluster"]["failure"]
    rc, out = run_json(daemon, "cluster", "kv", "put", "k", "v", "--timeout", "2")
    assert rc == 1 and out["error"]["code"] == "not_leader", out
    rc, out = run_json(daemon, "cluster", "status")
    assert rc == 0 and out["role"] == "failed" and out["leader"] is None


def test_corrupt_node_identity_is_a_clear_error_not_a_restart_loop(daemon: Daemon) -> None:
    daemon.start()
    assert daemon.terminate() == 0
    corrupt(daemon.state_dir / "node", b"meta", b"identity")
    daemon.start(wait_ready=False)
    assert daemon.proc is not None
    rc = daemon.proc.wait(timeout=60)
    log = daemon.log.read_text()
    assert rc == 4, log  # RestartPreventExitStatus: systemd does not loop on it
    assert "corrupt record in 'meta'" in log and "Traceback" not in log


def test_unsafe_state_dir_modes_are_fixed(daemon: Daemon) -> None:
    daemon.state_dir.mkdir(mode=0o755)
    os.chmod(daemon.state_dir, 0o755)
    old = os.umask(0o022)
    try:
        daemon.start()
    finally:
        os.umask(old)
    assert stat.S_IMODE(daemon.state_dir.stat().st_mode) == 0o700
    for p in daemon.state_dir.rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert not mode & 0o077, f"{p} is {mode:04o}"


def test_a_hung_daemon_gets_a_bounded_wait_that_says_what_it_waits_for(daemon: Daemon) -> None:
    daemon.start()
    assert daemon.proc is not None
    env = {**os.environ, "NODEOS_SOCKET": str(daemon.socket), "NODEOS_API_TIMEOUT": "7"}
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        r = subprocess.run([NODEOS, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    assert r.returncode == 1, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert err["code"] == "daemon_timeout" and "status" in err["message"], err
    assert "still waiting for nodeosd" in r.stderr and "to answer status" in r.stderr
    daemon.cli("status", "--json", check=True)  # and it answers again once it runs


def test_api_refuses_another_user_even_when_the_socket_mode_lets_it_in(daemon: Daemon) -> None:
    # Another user must be able to reach the socket's path: a directory of its own under /run.
    run_dir = Path(tempfile.mkdtemp(prefix="nodeos-test-", dir="/run"))
    sock = run_dir / "api.sock"
    daemon.extra = ["--api-socket", str(sock)]
    try:
        check_peer_credentials(daemon, run_dir, sock)
    finally:
        daemon.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def check_peer_credentials(daemon: Daemon, run_dir: Path, sock: Path) -> None:
    daemon.start()
    os.chmod(run_dir, 0o755)
    os.chmod(sock, 0o666)  # a mode loosened by hand: the credential check still holds
    probe = (
        "import os, socket, struct, msgpack\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(os.environ['SOCK'])\n"
        # Nothing sent: the refusal comes first (an API that served it would wait for a request).
        "data = b''\n"
        "while chunk := s.recv(65536):\n"
        "    data += chunk\n"
        "print(msgpack.unpackb(data[4:]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "SOCK": str(sock)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "permission_denied" in r.stdout and "node_name" not in r.stdout, r.stdout
    root = subprocess.run(
        [NODEOS, "--socket", str(sock), "status", "--json"], capture_output=True, text=True, timeout=60
    )
    assert root.returncode == 0, root.stderr  # root still gets in
    assert json.loads(root.stdout)["api"]["refused"] == 1
