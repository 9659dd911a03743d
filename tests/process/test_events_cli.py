"""`nodeos events` and `events.list` on a lone daemon: its own start reads cleanly, bad input
names the field, and `/metrics` is where `nodeos status` says it is."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest

from nodeos.cluster.localcluster import free_port
from nodeos.errors import BadInput
from nodeos.rpc.client import Client

from .conftest import Daemon

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]


@pytest.fixture
def lone(daemon: Daemon) -> Daemon:
    daemon.extra = ["--metrics-listen", f"127.0.0.1:{free_port()}"]
    daemon.start()
    return daemon


def test_a_fresh_node_lists_its_start_and_metrics_where_status_says(lone: Daemon) -> None:
    # A lone node is a cluster of one: its map's log has it joining and leading.
    deadline = time.monotonic() + 30
    while True:
        out = lone.cli_json("events")
        kinds = sorted(e["kind"] for e in out["events"])
        if kinds == ["leader_changed", "node_joined"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert out["source"] == "cluster" and kinds == ["leader_changed", "node_joined"], out
    assert out["last_seq"] == 2 and sorted(e["seq"] for e in out["events"]) == [1, 2]
    text = lone.cli("events").stdout
    assert "node_joined: node" in text and "leader_changed: node" in text and "term=" in text
    assert lone.cli("events", "--scope", "node").returncode == 0
    url = lone.cli_json("status")["observe"]["metrics_url"]
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    assert 'nodeos_dataplane_info{dataplane="none"} 1.0' in text
    assert "nodeos_cluster_member 1.0" in text  # a lone node is a cluster of one


BAD_PARAMS: list[tuple[dict[str, Any], str]] = [
    ({"since": -1}, "since"),
    ({"since": "5"}, "since"),
    ({"scope": "galaxy"}, "scope"),
    ({"limit": 0}, "limit"),
    ({"follow": "yes"}, "follow"),
    ({"follow": True, "timeout": 301}, "timeout"),
]


def test_bad_input_names_the_field(lone: Daemon) -> None:
    client = Client(str(lone.socket), timeout_s=30)
    before = lone.cli_json("events")["events"]
    for params, field in BAD_PARAMS:  # one daemon for all: each start costs seconds
        with pytest.raises(BadInput) as e:
            client.call("events.list", params)
        assert e.value.field == field, params
    assert lone.cli("events", "--since", "-3").returncode == 2
    assert lone.cli_json("events")["events"][: len(before)] == before  # nothing changed
