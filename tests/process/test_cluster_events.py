"""The cluster's event log across three real nodeosd processes: a member killed shows as
"node failed" and, once restarted, "recovered", read from a follower's console (its own copy
of the map), streamed by `--follow --json`, the same on every node, and written to exactly one
node's journal (the leader's; here the daemons log to files with the same fields)."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.localcluster import LocalNode
from nodeos.observe.service import DOWN_AFTER_S, WATCH_S

from .test_cluster_membership import nodes as nodes  # the fixture
from .test_cluster_membership import wait_status
from .test_control_plane import NODEOS, run, three

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def events(node: LocalNode, since: int = 0) -> list[dict[str, Any]]:
    rc, out = run(node, "events", "--since", str(since))
    assert rc == 0, out
    assert out["source"] == "cluster"
    return out["events"]


def wait_event(node: LocalNode, pred: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = events(node)
        for e in seen:
            if pred(e):
                return e
        time.sleep(0.3)
    raise AssertionError(f"no such event within {timeout} s; the log: {seen}")


def journal_lines(n: LocalNode, seq: int) -> list[str]:
    text = (Path(n.root) / "nodeosd.log").read_text(errors="replace")
    return [ln for ln in text.splitlines() if f"event_seq={seq} " in ln + " " and "event_kind=" in ln]


def follow(node: LocalNode, since: int) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    proc = subprocess.Popen(
        [NODEOS, "--socket", node.socket, "events", "--follow", "--json", "--since", str(since)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def test_a_killed_member_is_failed_then_recovered_in_every_nodes_log(nodes: Any) -> None:
    ns = three(nodes)
    leader_id = wait_status(ns[0], lambda s: s["leader"] is not None)["leader"]
    victim, reader = [n for n in ns if n.raft_id != leader_id][:2]
    leader = next(n for n in ns if n.raft_id == leader_id)
    # The new leader recorded its term; all three joined.
    led = wait_event(reader, lambda e: e["kind"] == "leader_changed" and e["node"] == leader_id)
    assert isinstance(led["term"], int) and led["term"] >= 1
    assert sorted(e["node"] for e in events(reader) if e["kind"] == "node_joined") == [1, 2, 3]

    start = events(reader)[-1]["seq"]
    proc, lines = follow(reader, start)
    try:
        victim.kill()
        failed = wait_event(
            reader, lambda e: e["kind"] == "node_failed" and e["node"] == victim.raft_id and e["seq"] > start
        )
        assert failed["severity"] == "critical" and str(victim.raft_id) in failed["message"]
        # The follow stream printed the same event, one JSON object per line.
        deadline, streamed = time.monotonic() + 30, []
        while not any(e["seq"] == failed["seq"] for e in streamed) and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                streamed.append(json.loads(lines.get(timeout=1)))
        assert [e for e in streamed if e["seq"] == failed["seq"]] == [failed]
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    victim.start()
    recovered = wait_event(
        reader,
        lambda e: e["kind"] == "node_recovered" and e["node"] == victim.raft_id and e["seq"] > failed["seq"],
    )
    assert recovered["severity"] == "info"
    # Every node holds the same log (the restarted one caught up), numbered the same.
    wait_status(victim, lambda s: s["applied"] >= 1 and s["leader"] is not None)
    deadline = time.monotonic() + 30
    while True:
        logs = [[(e["seq"], e["kind"], e.get("node")) for e in events(n)] for n in ns]
        upto = min(len(x) for x in logs)
        if all(x[:upto] == logs[0][:upto] for x in logs) and all(
            any(s == recovered["seq"] for s, _k, _n in x) for x in logs
        ):
            break
        assert time.monotonic() < deadline, logs
        time.sleep(0.3)
    # The journal has each map event once: on the leader that applied it.
    for e in (failed, recovered):
        per_node = {n.raft_id: len(journal_lines(n, e["seq"])) for n in ns}
        assert sorted(per_node.values()) == [0, 0, 1], (e, per_node)
        assert per_node[leader.raft_id] == 1


def test_a_killed_leader_is_failed_and_its_successor_records_its_term(nodes: Any) -> None:
    ns = three(nodes)
    old_id = wait_status(ns[0], lambda s: s["leader"] is not None)["leader"]
    old = next(n for n in ns if n.raft_id == old_id)
    rest = [n for n in ns if n is not old]
    first = wait_event(rest[0], lambda e: e["kind"] == "leader_changed" and e["node"] == old_id)
    start = events(rest[0])[-1]["seq"]
    old.kill()
    led = wait_event(
        rest[0], lambda e: e["kind"] == "leader_changed" and e["seq"] > start and e["node"] != old_id
    )
    assert led["term"] > first["term"] and led["node"] in (rest[0].raft_id, rest[1].raft_id)
    failed = wait_event(rest[1], lambda e: e["kind"] == "node_failed" and e["seq"] > start)
    assert failed["node"] == old_id
    # The new leader's fresh view of the live member (no answer heard yet) is no failure. An
    # absence has no event to wait for: look once the hold time and two watcher rounds passed.
    time.sleep(max(0.0, led["at"] + DOWN_AFTER_S + 2 * WATCH_S - time.time()))
    after = [e for e in events(rest[1], start) if e["kind"] in ("node_failed", "node_recovered")]
    assert [(e["kind"], e["node"]) for e in after] == [("node_failed", old_id)]
