"""The data plane watch: health from probes and time (hysteresis, re-apply, restart), and the
two probes against a real configfs-shaped tree and a real unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.node import dpwatch
from nodeos.node.dpwatch import Health, Probe, applied, decide

DEAD = Probe(False, "nvmet is gone")
WHOLE = Probe(True, None, "i1")


def run(h: Health, probes: list[tuple[float, Probe]]) -> tuple[Health, list[tuple[float, str]]]:
    """Feed probes (monotonic start, result); a re-apply asked for succeeds at once."""
    actions = []
    for t, p in probes:
        h, act = decide(h, p, t, 1000.0 + t)
        if act:
            actions.append((t, act))
        if act == "reapply":
            h = applied(h, True)
    return h, actions


def test_a_dead_target_is_down_within_the_bound_and_says_why() -> None:
    h, acts = run(Health(instance="i1"), [(0.0, WHOLE), (1.0, DEAD), (2.0, DEAD), (3.0, DEAD)])
    assert acts == [(3.0, "down")]
    assert h.state == "down" and h.reason == "nvmet is gone" and h.since == 1001.0  # since the first failure
    assert 3.0 <= dpwatch.EVERY_S + dpwatch.DOWN_AFTER_S <= dpwatch.BOUND_S


def test_one_slow_probe_between_good_ones_never_flips_it() -> None:
    slow = Probe(False, "SPDK did not answer spdk_get_version within 2 s")
    probes = [(0.0, WHOLE), (1.0, slow), (3.0, WHOLE), (4.0, slow), (6.0, WHOLE), (7.0, slow)]
    h, acts = run(Health(instance="i1"), probes)
    assert acts == [] and h.state == "up"


def test_two_slow_probes_in_a_row_are_down() -> None:
    slow = Probe(False, "SPDK did not answer spdk_get_version within 2 s")
    _, acts = run(Health(instance="i1"), [(0.0, WHOLE), (1.0, slow), (3.0, slow)])
    assert acts == [(3.0, "down")]


def test_back_means_reapplied_then_whole_twice_then_up() -> None:
    h, _ = run(Health(instance="i1"), [(0.0, DEAD), (1.0, DEAD), (2.0, DEAD)])
    assert h.state == "down"
    h, acts = run(h, [(10.0, WHOLE), (11.0, WHOLE), (12.0, WHOLE)])
    assert acts == [(10.0, "reapply"), (12.0, "up")]
    assert h.state == "up" and h.reason is None and h.since is None


def test_nvmet_back_but_empty_is_reapplied_and_a_failed_reapply_retried_later() -> None:
    h, _ = run(Health(), [(0.0, DEAD), (1.0, DEAD), (2.0, DEAD)])
    empty = Probe(True, "1 export(s) missing from nvmet: nqn.x")
    h, act = decide(h, empty, 10.0, 0.0)
    assert act == "reapply"
    h = applied(h, False)
    h, act = decide(h, empty, 11.0, 0.0)
    assert act is None and h.state == "down"  # not hammered every probe
    h, act = decide(h, empty, 10.0 + dpwatch.REAPPLY_EVERY_S, 0.0)
    assert act == "reapply"


def test_a_restart_between_two_probes_is_down_at_once_and_reapplied() -> None:
    i2 = Probe(True, None, "i2")  # the socket's inode changed: a new, empty target
    h, acts = run(Health(), [(0.0, WHOLE), (1.0, i2)])
    assert acts == [(1.0, "down")] and "restarted" in str(h.reason)
    h, acts = run(h, [(2.0, i2), (3.0, i2), (4.0, i2)])
    assert acts == [(2.0, "reapply"), (4.0, "up")] and h.state == "up"


def nvmet_tree(root: Path, subs: list[str], linked: list[str]) -> Path:
    (root / "subsystems").mkdir(parents=True)
    (root / "ports" / "1" / "subsystems").mkdir(parents=True)
    for s in subs:
        (root / "subsystems" / s).mkdir()
    for s in linked:
        (root / "ports" / "1" / "subsystems" / s).mkdir()
    return root


def test_kernel_probe_finds_nvmet_gone_and_exports_it_held_gone(tmp_path: Path) -> None:
    assert dpwatch.probe_kernel(str(tmp_path / "nvmet"), ["a"]) == Probe(
        False, f"nvmet is gone ({tmp_path / 'nvmet'}: No such file or directory)"
    )
    root = nvmet_tree(tmp_path / "nvmet", ["a", "b"], ["a"])
    p = dpwatch.probe_kernel(str(root), ["a", "b", "c"])
    assert p == Probe(True, None, present=frozenset({"a"}))  # b is on no port, c not there
    # b and c never were there (their export failed: reported on its own): not this watch's problem
    judged, seen = dpwatch.missing(p, ["a", "b", "c"], set())
    assert judged.problem is None and seen == {"a"}
    (root / "ports" / "1" / "subsystems" / "a").rmdir()
    judged, seen = dpwatch.missing(dpwatch.probe_kernel(str(root), ["a", "b"]), ["a", "b"], seen)
    assert judged.alive and judged.problem == "1 export(s) missing from nvmet: a" and seen == {"a"}
    # a volume deleted meanwhile is no longer wanted: forgotten
    judged, seen = dpwatch.missing(dpwatch.probe_kernel(str(root), ["b"]), ["b"], seen)
    assert judged.problem is None and seen == set()


@pytest.fixture
def spdk_like(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A unix socket server answering spdk_get_version (mode "ok"), nothing ("hang") or junk."""
    path = tmp_path / "spdk.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)
    mode = {"mode": "ok"}

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                req = json.loads(conn.recv(4096))
                if mode["mode"] == "hang":
                    conn.recv(4096)  # until the client gives up
                    continue
                result = {"version": "SPDK v26.05"} if mode["mode"] == "ok" else {}
                conn.sendall(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": result}).encode())

    threading.Thread(target=serve, daemon=True).start()
    yield path, mode
    srv.close()


def test_spdk_probe_answers_hangs_and_goes_away(spdk_like: tuple[Path, dict[str, str]]) -> None:
    path, mode = spdk_like
    ok = dpwatch.probe_spdk(str(path), 1.0)
    st = path.stat()
    assert ok.alive and ok.problem is None
    assert ok.instance == (st.st_dev, st.st_ino, st.st_ctime_ns, os.getpid())
    assert dpwatch.probe_spdk(str(path), 1.0).instance == ok.instance  # the same target: the same
    mode["mode"] = "hang"
    assert dpwatch.probe_spdk(str(path), 0.3) == Probe(
        False, "SPDK did not answer spdk_get_version within 0.3 s"
    )
    mode["mode"] = "junk"
    assert not dpwatch.probe_spdk(str(path), 1.0).alive
    path.unlink()
    gone = dpwatch.probe_spdk(str(path), 1.0)
    assert not gone.alive and "No such file" in str(gone.problem)


@pytest.mark.parametrize("restored", [["nqn.a", "nqn.b"], ["nqn.a"]], ids=["all", "one-not-restored"])
def test_the_watch_reports_nvmet_gone_and_reapplies_it_when_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored: list[str]
) -> None:
    """The loop's one round (tick) against a configfs-shaped tree: gone -> down, back empty ->
    re-applied -> up. The re-apply here rebuilds the tree, as the node's re-export would; an
    export it cannot bring back (its volume's own trouble, reported by the re-export) does not
    keep the data plane down. Time scaled down 10x."""
    monkeypatch.setattr(dpwatch, "EVERY_S", 0.1)
    monkeypatch.setattr(dpwatch, "DOWN_AFTER_S", 0.2)
    monkeypatch.setattr(dpwatch, "BOUND_S", 0.5)
    root = tmp_path / "nvmet"
    changes: list[bool] = []
    reapplied: list[float] = []

    async def reapply() -> bool:
        reapplied.append(time.monotonic())
        for nqn in restored:
            (root / "subsystems" / nqn).mkdir()
            (root / "ports" / "1" / "subsystems" / nqn).mkdir()
        return True

    wanted = ["nqn.a", "nqn.b"]
    watch = dpwatch.DataPlaneWatch(
        lambda nqns: dpwatch.probe_kernel(str(root), nqns), lambda: wanted, reapply, changes.append
    )

    async def rounds(n: int) -> None:
        for _ in range(n):
            await watch.tick()
            await asyncio.sleep(dpwatch.EVERY_S)

    async def scenario() -> None:
        nvmet_tree(root, wanted, wanted)
        await rounds(2)
        assert not watch.down and changes == [] and watch.seen == set(wanted)
        shutil.rmtree(root)  # nvmet unloaded
        gone = time.monotonic()
        while not watch.down:
            await rounds(1)
        assert time.monotonic() - gone <= dpwatch.BOUND_S and changes == [False]
        assert "nvmet is gone" in str(watch.health.reason)
        nvmet_tree(root, [], [])  # loaded again, empty
        await rounds(3)
        assert len(reapplied) == 1 and changes == [False, True] and not watch.down
        assert watch.seen == set(restored)

    asyncio.run(scenario())


def test_status_shows_a_down_data_plane_with_since_and_reason() -> None:
    from nodeos.cli.render import status_human

    down = {"state": "down", "since": 0.0, "reason": "nvmet is gone"}
    base = {"node_name": "s1", "dataplane": {"name": "kernel", "reason": "auto"}, "services": ["node"]}
    text = status_human({**base, "node": {"dataplane_health": down}})
    lines = text.splitlines()
    assert lines[lines.index("dataplane kernel (auto)") + 1] == (
        "DOWN      data plane since 1970-01-01 00:00:00 UTC: nvmet is gone"
    )
    up = {"state": "up", "since": None, "reason": None}
    assert "DOWN" not in status_human({**base, "node": {"dataplane_health": up}})


def test_status_human_shows_data_plane_errors_not_only_json() -> None:
    from nodeos.cli.render import status_human

    raid = "raid nodeos_p_raid0 was not created: a drive holds the superblock of a different raid"
    d = {
        "node_name": "s1",
        "dataplane": {"name": "spdk", "reason": "auto", "transport_errors": {"rdma": "no RDMA device"}},
        "services": ["node"],
        "node": {
            "reconcile": {"errors": [raid], "failed": True, "missing": ["v1"]},
            "recovery": [{"op": "pool.create", "name": "p", "result": "pending", "error": raid}],
        },
    }
    lines = status_human(d).splitlines()
    assert f"ERROR     reconcile failed: {raid}" in lines
    assert f"ERROR     pool.create p (pending): {raid}" in lines
    assert (
        "WARNING   transport rdma: no RDMA device" in lines
        and "MISSING   volume v1 is not in the data plane" in lines
    )
    gone = status_human(
        {**d, "dataplane": {"name": "spdk", "reason": "auto", "error": "SPDK does not answer"}}
    )
    assert "ERROR     data plane: SPDK does not answer" in gone.splitlines()


def test_a_target_restarted_on_the_same_socket_is_told_apart(tmp_path: Path) -> None:
    """A socket re-created at once gets the freed inode number back (ext4 does; the real nvmf_tgt
    restart went unnoticed so): the probe still tells the new target from the old one."""
    path = tmp_path / "spdk.sock"

    def serve_once() -> socket.socket:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(path))
        srv.listen(1)

        def answer() -> None:
            with contextlib.suppress(OSError):
                conn, _ = srv.accept()
                with conn:
                    req = json.loads(conn.recv(4096))
                    reply = {"jsonrpc": "2.0", "id": req["id"], "result": {"version": "SPDK v26.05"}}
                    conn.sendall(json.dumps(reply).encode())

        threading.Thread(target=answer, daemon=True).start()
        return srv

    srv = serve_once()
    before = dpwatch.probe_spdk(str(path), 1.0)
    srv.close()
    path.unlink()
    time.sleep(0.05)  # a restart takes longer than this
    srv = serve_once()
    try:
        after = dpwatch.probe_spdk(str(path), 1.0)
    finally:
        srv.close()
    assert before.alive and after.alive and after.instance != before.instance
    h, action = dpwatch.decide(dpwatch.Health(instance=before.instance), after, 10.0, 1e9)
    assert action == "down" and h.reason == "the data plane restarted: its exports are gone"
