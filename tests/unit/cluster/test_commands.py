"""The map commands are listed once (nodeos/cluster/commands.py) and the map applies exactly those."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster import commands
from nodeos.cluster import map as map_mod
from nodeos.cluster.map import ClusterMap, encode_command

DOCS = Path(__file__).resolve().parents[3] / "docs" / "cluster.md"


def _seeded() -> ClusterMap:
    m = ClusterMap()
    m.apply(1, encode_command("init_cluster", {"cluster_id": "c1"}))
    m.apply(2, encode_command("add_node", {"node_id": 1, "addresses": {"peer": "127.0.0.1:1"}}))
    m.apply(3, encode_command("kv_put", {"key": "k", "value": "v"}))
    return m


def test_the_handlers_are_exactly_the_listed_commands() -> None:
    assert commands.disagreements(map_mod.HANDLERS) == []
    for c in commands.COMMANDS:
        fn = map_mod.HANDLERS[c.name][c.version]
        assert fn.__module__ == c.owner, f"{c.name} v{c.version} is applied in {fn.__module__}, not {c.owner}"
        assert importlib.import_module(c.owner) is not None
        assert c.summary and c.version >= 1


def test_a_handler_without_a_listing_and_a_listing_without_a_handler_are_named() -> None:
    def extra(st: dict[str, Any], args: dict[str, Any]) -> Any:
        return None

    more = {**map_mod.HANDLERS, "volume_grow": {1: extra}, "kv_put": {1: extra, 2: extra}}
    assert commands.disagreements(more) == [
        "kv_put v2 has a handler but is not listed",
        "volume_grow v1 has a handler but is not listed",
    ]
    fewer = {k: v for k, v in map_mod.HANDLERS.items() if k != "kv_get"}
    assert commands.disagreements(fewer) == ["kv_get v1 is listed but has no handler"]
    with pytest.raises(RuntimeError, match="kv_get v1 is listed but has no handler"):
        commands.check_handlers(fewer)


def test_a_command_is_listed_once() -> None:
    pairs = [(c.name, c.version) for c in commands.COMMANDS]
    assert len(pairs) == len(set(pairs))
    with pytest.raises(RuntimeError, match="listed twice"):
        commands._index((commands.COMMANDS[0], commands.COMMANDS[0]))


@pytest.mark.parametrize(
    ("cmd", "v"),
    [
        ("kv_put", 2),  # a newer version of a known command
        ("add_node", 99),
        ("volume_grow", 1),  # a command this node does not know
    ],
)
def test_an_unknown_or_newer_command_stops_the_map_and_changes_nothing(cmd: str, v: int) -> None:
    """Never skipped: newer members apply it, so skipping it here would make the maps differ."""
    m = _seeded()
    before = m.snapshot()
    out = m.apply(4, encode_command(cmd, {"key": "k", "value": "other", "node_id": 2}, v=v))
    assert out["error"]["code"] == "not_supported"
    assert "needs a release newer than" in out["error"]["message"] and "entry 4" in out["error"]["message"]
    assert f"{cmd} v{v}" in out["error"]["message"]
    assert m.snapshot() == before, "an unknown command changed the map"
    assert m.applied_index == 3 and m.stalled is not None and m.stalled["index"] == 4
    # Nothing after it is applied either: the map stays at the entry before it.
    assert "error" in m.apply(5, encode_command("kv_put", {"key": "k", "value": "later"}))
    assert m.applied_index == 3 and m.kv_get("k") == "v"


def test_the_docs_name_every_command() -> None:
    text = DOCS.read_text()
    section = text[text.index("The map (`nodeos/cluster/map.py`)") :]
    section = section[: section.index("\n- A Raft entry")]
    named = set(re.findall(r"`([a-z_]+)`", section))
    missing = [c.name for c in commands.COMMANDS if c.name not in named]
    assert not missing, f"docs/cluster.md does not name map commands {missing}"
