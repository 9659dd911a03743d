"""A real Prometheus (Debian's `prometheus`) scrapes a cluster of real nodeosd processes with
the shipped alert rules: the operator sees the leader, the commit index grow with writes,
API errors by code, and NodeosNodeDown fire when a node is killed; `nodeos events --follow`
on the leader shows the node fail."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster.localcluster import LocalCluster, free_port
from nodeos.errors import BadInput
from tests.prometheus_helpers import PROMETHEUS, Prometheus

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

NODEOS = str(Path(sys.executable).parent / "nodeos")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path, 3)
    try:
        c.form()
        yield c
    finally:
        c.stop()


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package) not installed")
def test_prometheus_scrapes_the_cluster_and_alerts_when_a_node_dies(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    by_target = {n.metrics_address: n for n in cluster.nodes}
    prom = Prometheus(tmp_path, sorted(by_target), port=free_port())
    try:
        prom.wait("every node scraped", lambda: len(prom.query('up{job="nodeos"} == 1')) == 3)
        leader = cluster.leader()
        # Exactly one node reports itself leader, and it is the one the cluster names.
        leaders = prom.wait("a leader", lambda: prom.query("nodeos_cluster_is_leader == 1"))
        assert [r["metric"]["instance"] for r in leaders] == [leader.metrics_address]
        assert prom.query("nodeos_cluster_members{state='up'}")[0]["value"][1] == "3"

        # Writes through the cluster move the commit index every node exports.
        before = float(
            prom.query(f'nodeos_cluster_commit_index{{instance="{leader.metrics_address}"}}')[0]["value"][1]
        )
        for i in range(20):
            leader.call("cluster.kv.put", {"key": f"k{i}", "value": i})
        prom.wait(
            "commit index grew by the writes",
            lambda: (
                min(float(r["value"][1]) for r in prom.query("nodeos_cluster_commit_index")) >= before + 20
            ),
        )
        # A bad request is counted by its error code.
        with pytest.raises(BadInput):
            leader.call("cluster.kv.get", {"key": ""})
        prom.wait(
            "bad_input counted",
            lambda: prom.query(
                f'nodeos_api_errors_total{{code="bad_input",instance="{leader.metrics_address}"}}'
            ),
        )

        follow = subprocess.Popen(
            [NODEOS, "--socket", leader.socket, "events", "--follow", "--json"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            victim = next(n for n in cluster.nodes if n is not leader)
            victim.kill()
            firing = prom.wait("NodeosNodeDown firing", lambda: prom.firing("NodeosNodeDown"), timeout=90)
            assert [a["labels"]["instance"] for a in firing] == [victim.metrics_address]
            assert firing[0]["labels"]["severity"] == "critical"
            down = prom.query(f'nodeos_cluster_member_up{{member="{victim.raft_id}"}}')
            assert [r["value"][1] for r in down] == ["0"]
            # The leader's event log says which node failed, live.
            assert follow.stdout is not None
            seen: list[dict[str, Any]] = []
            lines: queue.Queue[str] = queue.Queue()
            threading.Thread(target=lambda: [lines.put(x) for x in follow.stdout], daemon=True).start()
            deadline = time.monotonic() + 30
            while not any(e["kind"] == "node_failed" for e in seen) and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    seen.append(json.loads(lines.get(timeout=1.0)))
            failed = [e for e in seen if e["kind"] == "node_failed"]
            assert failed, f"no node_failed event; saw {seen}"
            assert failed[0]["node"] == victim.raft_id and failed[0]["severity"] == "critical"
            # The same event in the daemon's log with its structured fields (NODEOS_EVENT_KIND=...
            # in the journal; key=value on stderr, as here).
            log = (leader.root / "nodeosd.log").read_text()
            assert f"event_kind=node_failed event_severity=critical event_seq={failed[0]['seq']}" in log
        finally:
            follow.terminate()
            follow.wait(timeout=10)
    finally:
        prom.stop()
