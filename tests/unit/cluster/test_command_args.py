"""Typed map command arguments (nodeos/cluster/command_args.py): strict when proposed, observed
(never enforced) when applied, so nodes of two releases applying one log hold one map."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

from nodeos.cluster import command_args, commands
from nodeos.cluster.driver import RaftDriver
from nodeos.cluster.feature_member import GatedDriver
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.errors import BadInput


def test_every_listed_command_version_names_a_record_of_its_own() -> None:
    bare = [f"{c.name} v{c.version}" for c in commands.COMMANDS if c.args is command_args.Args]
    assert bare == []
    assert all(issubclass(c.args, command_args.Args) for c in commands.COMMANDS)


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("add_node", {"node_id": "2"}, "node_id"),
        ("add_node", {"node_id": 0}, "node_id"),
        ("add_node", {"node_id": True}, "node_id"),
        ("add_node", {"node_id": 2, "addresses": {"peer": 1}}, "addresses"),
        ("volume_create", {"name": "v"}, "uuid"),
        ("volume_resize", {"name": "v", "size_bytes": "1G"}, "size_bytes"),
        ("kv_put", {"key": "k", "value": 1.5}, "value"),
        ("kv_put", {"key": "", "value": 1}, "key"),
        ("record_event", {"kind": "x", "message": "m", "at": 1.0, "seq": 3}, "seq"),
        ("volume_hosts", {"name": "v", "add": True}, "host"),
        ("upgrade_start", {"id": "u", "version": "1", "bundle": {"sha256": "0"}, "domains": []}, "bundle"),
    ],
)
def test_a_proposal_breaking_its_record_is_refused_naming_the_field(name: str, args: Any, field: str) -> None:
    with pytest.raises(BadInput) as err:
        commands.check_args(name, 1, args)
    assert err.value.field == field
    assert f"map command {name} v1" in str(err.value)


def test_unknown_arguments_are_ignored_and_unknown_commands_refused() -> None:
    # An added optional argument keeps the version: a release that does not know it ignores it.
    out = commands.check_args("kv_put", 1, {"key": "k", "value": 1, "added_later": True})
    assert isinstance(out, command_args.KvPut)
    with pytest.raises(BadInput) as err:
        commands.check_args("launch_rockets", 1, {})
    assert err.value.field == "cmd"
    with pytest.raises(BadInput) as err:
        commands.check_args("kv_put", 9, {"key": "k", "value": 1})
    assert err.value.field == "v"


def _member_map() -> ClusterMap:
    m = ClusterMap()
    m.apply(1, encode_command("init_cluster", {"cluster_id": "c"}))
    m.apply(2, encode_command("add_node", {"node_id": 1, "addresses": {"peer": "a:1"}}))
    return m


def test_apply_keeps_what_the_handler_accepted_and_only_counts_what_the_record_refuses() -> None:
    """A log written by an older release may hold arguments the record now refuses; the handler
    accepted them then, so every release must apply them the same way (and say so only)."""
    m = _member_map()
    loose = {"node_id": 1, "seq": 1, "host_nqn": 7}  # the handler stores str(7); the record wants a str
    with pytest.raises(BadInput):
        commands.check_args("node_report", 1, loose)
    out = m.apply(3, msgpack.packb({"cmd": "node_report", "v": 1, "args": loose}))
    assert out == {"result": {"node_id": 1, "seq": 1}}
    assert m.state["nodes"][1]["host_nqn"] == "7"
    assert [(x["index"], x["cmd"]) for x in m.nonconforming] == [(3, "node_report")]
    assert "host_nqn" in m.nonconforming[0]["why"]
    # Refused by the handler as before: its own words, recorded the same on every node.
    out = m.apply(4, msgpack.packb({"cmd": "remove_node", "v": 1, "args": {"node_id": "1"}}))
    assert out["error"]["message"] == "node_id must be a positive integer"
    assert len(m.nonconforming) == 2
    # Fitting arguments are not counted.
    m.apply(5, encode_command("kv_put", {"key": "k", "value": 1}))
    assert len(m.nonconforming) == 2


def test_the_daemons_driver_refuses_a_proposal_breaking_its_record_before_raft(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proposed: list[bytes] = []

    async def to_raft(self: Any, command: bytes, timeout: float = 5.0) -> Any:
        proposed.append(command)
        return "committed"

    monkeypatch.setattr(RaftDriver, "propose", to_raft)
    d: Any = object.__new__(GatedDriver)
    d.map, d.id = _member_map(), 1
    good = encode_command("kv_put", {"key": "k", "value": 1})
    assert asyncio.run(d.propose(good)) == "committed"
    with pytest.raises(BadInput) as err:
        asyncio.run(d.propose(encode_command("volume_resize", {"name": "v", "size_bytes": "big"})))
    assert err.value.field == "size_bytes"
    assert proposed == [good]
