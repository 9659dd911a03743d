"""`nodeos events` and `events.list` on a lone daemon: an empty log reads cleanly, bad input
names the field, and `/metrics` is where `nodeos status` says it is."""

from __future__ import annotations

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


def test_events_on_a_fresh_node_and_metrics_where_status_says(lone: Daemon) -> None:
    out = lone.cli_json("events")
    assert out == {"source": "node", "events": [], "last_seq": 0}
    assert lone.cli("events").stdout.strip() == "(no events; source: node)"
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
    for params, field in BAD_PARAMS:  # one daemon for all: each start costs seconds
        with pytest.raises(BadInput) as e:
            client.call("events.list", params)
        assert e.value.field == field, params
    assert lone.cli("events", "--since", "-3").returncode == 2
    assert lone.cli_json("events")["events"] == []  # nothing changed
