"""Committed map entries whose arguments broke their typed record (`ClusterMap.nonconforming`:
observed at apply, never acted on) as an operator sees them: `nodeos cluster status` in text and
`--json`, the Prometheus counter on /metrics, and the alert over it (rules_test.yml). The map is
real, the entries go through its apply, and the status is the cluster service's own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from click.testing import CliRunner

from nodeos.cli import cluster as cluster_cli
from nodeos.cli.main import cli
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.service import ClusterService
from nodeos.observe import sources

from .snapshots import scrape, value

COUNTER = "nodeos_cluster_nonconforming_commands_total"


def _map(loose: int) -> ClusterMap:
    """A member's map that applied `loose` node_report entries whose host_nqn is an int (the
    handler stores str(7); the record wants a str), a refused command and a fitting one."""
    m = ClusterMap()
    m.apply(1, encode_command("init_cluster", {"cluster_id": "c"}))
    m.apply(2, encode_command("add_node", {"node_id": 1, "addresses": {"peer": "a:1"}}))
    for i in range(loose):
        args = {"node_id": 1, "seq": i + 1, "host_nqn": 7}
        m.apply(3 + i, msgpack.packb({"cmd": "node_report", "v": 1, "args": args}))
    m.apply(3 + loose, encode_command("kv_put", {"key": "k", "value": 1}))  # fits: not counted
    return m


def _service(tmp_path: Path, m: ClusterMap) -> ClusterService:
    """The cluster service over a stand-in driver holding the real map (one voter, no peers)."""
    svc = ClusterService(SimpleNamespace(state_dir=str(tmp_path), peer_listen=None, dataplane=None))
    raft = {"role": "leader", "leader": 1, "term": 2, "commit": m.applied_index, "applied": m.applied_index}
    svc.driver = SimpleNamespace(  # type: ignore[assignment]
        id=1,
        leader=1,
        map=m,
        running=True,
        conf_state=SimpleNamespace(voters=[1], learners=[]),
        status=lambda: {**raft, "last_index": m.applied_index, "progress": None, "voter_set": None},
    )
    svc.identity = {"cluster_id": "c", "raft_id": 1}
    for part in ("secret_status", "ca_status", "data_key_status", "feature_status"):
        setattr(svc, part, lambda: {})
    return svc


def _console(monkeypatch: pytest.MonkeyPatch, reply: dict[str, Any], *args: str) -> str:
    """`nodeos cluster status ARGS` against a daemon that answers `reply`."""

    class Daemon:
        def __init__(self, socket_path: str, timeout_s: float | None = None) -> None:
            pass

        def call(self, method: str, params: Any = None, progress: str | None = None) -> Any:
            assert method == "cluster.status"
            return reply

    monkeypatch.setattr(cluster_cli, "Client", Daemon)
    r = CliRunner().invoke(cli, ["cluster", "status", *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_the_operator_sees_nonconforming_entries_in_status_json_text_and_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = _map(loose=7)
    svc = _service(tmp_path, m)
    reply = asyncio.run(svc.api_status({}))

    # --json: how many this node applied, and the last five, each with its entry, command and why.
    doc = json.loads(_console(monkeypatch, reply, "--json"))
    assert doc["nonconforming_commands"] == 7
    assert [(x["index"], x["cmd"], x["v"]) for x in doc["nonconforming"]] == [
        (i, "node_report", 1) for i in range(5, 10)
    ]
    assert all("host_nqn" in x["why"] for x in doc["nonconforming"])
    assert doc["rejected_commands"] == 0 and doc["rejected"] == []  # the existing fields unchanged

    # Text: one line saying how many and what it means, then each of the last entries.
    text = _console(monkeypatch, reply)
    lines = text.splitlines()
    head = [ln for ln in lines if ln.startswith("map ")]
    assert head == [
        "map      7 committed entries whose arguments break their command's typed record "
        "(seen at apply, applied as the handler read them, not refused)"
    ]
    entries = [ln.strip() for ln in lines if ln.strip().startswith("entry ")]
    assert [e.split(":")[0] for e in entries] == [f"entry {i}" for i in range(5, 10)]
    assert all(e.startswith(f"entry {e.split()[1]} node_report v1: ") and "host_nqn" in e for e in entries)

    # /metrics: the counter this node exports, what the alert NodeosMapNonconformingCommand reads.
    fams = scrape({"cluster": sources.cluster_view(svc)})
    assert value(fams, COUNTER) == 7


def test_a_clean_map_shows_nothing_in_text_and_zero_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = _service(tmp_path, _map(loose=0))
    reply = asyncio.run(svc.api_status({}))
    doc = json.loads(_console(monkeypatch, reply, "--json"))
    assert doc["nonconforming_commands"] == 0 and doc["nonconforming"] == []
    text = _console(monkeypatch, reply)
    assert "cluster  c" in text and "typed record" not in text and "entry " not in text
    assert value(scrape({"cluster": sources.cluster_view(svc)}), COUNTER) == 0  # present from the start


def test_the_count_goes_on_past_the_entries_kept() -> None:
    """The map keeps the last 64 entries; the count is every one this process applied."""
    m = _map(loose=70)
    assert len(m.nonconforming) == 64 and m.nonconforming_total == 70
    assert m.observed()["nonconforming_commands"] == 70
