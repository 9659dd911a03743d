"""The provisioning document's parser (pure): a valid document becomes a Plan; every field's bad
value is refused naming that field (a path into the document) and what it allows."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import pytest

from nodeos.errors import EXIT_BAD_INPUT, BadInput
from nodeos.provision.model import parse

from .helpers import KEY, VALID_TOML, ssh_line, valid


def test_a_valid_document_is_its_plan() -> None:
    plan = parse(valid(), "/mnt/cfg")
    assert plan.hostname == "s1"
    assert [i.name for i in plan.interfaces] == ["eno1", "ens1f0"]
    assert plan.interfaces[0].mtu is None, "no mtu: the interface keeps its own (not the lossless 9000)"
    assert plan.interfaces[1].mtu == 9000
    assert plan.interfaces[0].routes[0].gateway == "192.0.2.1"
    assert plan.management_address == "192.0.2.11" and plan.management_interface == "eno1"
    assert plan.storage_addresses == ("198.51.100.11",)
    assert plan.peer_listen == "198.51.100.11:7100"
    assert plan.ntp == ("192.0.2.1", "ntp.example.net")
    assert plan.ssh_keys == (KEY,)
    assert plan.labels == {"rack": "r1", "switch": "sw1"}
    assert plan.cluster is not None and plan.cluster.token_file == "/mnt/cfg/join.token"
    assert parse(tomllib.loads(VALID_TOML), "/mnt/cfg") == plan, "the documented TOML is the same plan"


def test_an_empty_document_changes_nothing() -> None:
    plan = parse({})
    assert plan.hostname is None and plan.interfaces == () and plan.cluster is None


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *head, last = path.split("/")
        cur: Any = doc
        for p in head:
            cur = cur[int(p)] if p.isdigit() else cur[p]
        if value is _DEL:
            del cur[int(last) if last.isdigit() else last]
        elif last.isdigit():
            cur[int(last)] = value
        else:
            cur[last] = value

    return edit


_DEL = object()
IF0 = "network/interfaces/0"
IF1 = "network/interfaces/1"

# (what is wrong, the edit, the field the error must name)
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown top-level key", _set("hostnme", "x"), "hostnme"),
    ("version", _set("version", 2), "version"),
    ("hostname with underscore", _set("hostname", "s_1"), "hostname"),
    ("hostname too long", _set("hostname", "s" * 64), "hostname"),
    ("hostname not a string", _set("hostname", 7), "hostname"),
    ("network not a table", _set("network", []), "network"),
    ("network unknown key", _set("network/qos", {}), "network.qos"),
    ("interfaces not a list", _set("network/interfaces", {}), "network.interfaces"),
    ("interface name", _set(f"{IF0}/name", "a-very-long-interface-name"), "network.interfaces[0].name"),
    ("interface unknown key", _set(f"{IF0}/speed", 10), "network.interfaces[0].speed"),
    ("mtu too small", _set(f"{IF1}/mtu", 10), "network.interfaces[1].mtu"),
    ("mtu a string", _set(f"{IF1}/mtu", "jumbo"), "network.interfaces[1].mtu"),
    (
        "address without prefix",
        _set(f"{IF0}/addresses/0", "192.0.2.11"),
        "network.interfaces[0].addresses[0]",
    ),
    (
        "address not an address",
        _set(f"{IF1}/addresses/0", "198.51.100.300/24"),
        "network.interfaces[1].addresses[0]",
    ),
    ("addresses not a list", _set(f"{IF0}/addresses", "192.0.2.11/24"), "network.interfaces[0].addresses"),
    ("route dst", _set(f"{IF0}/routes/0/dst", "default"), "network.interfaces[0].routes[0].dst"),
    ("route gateway", _set(f"{IF0}/routes/0/gateway", "router"), "network.interfaces[0].routes[0].gateway"),
    ("route metric", _set(f"{IF0}/routes/0/metric", -1), "network.interfaces[0].routes[0].metric"),
    ("route unknown key", _set(f"{IF0}/routes/0/via", "x"), "network.interfaces[0].routes[0].via"),
    ("up not a bool", _set(f"{IF0}/up", "yes"), "network.interfaces[0].up"),
    ("interface twice", _set(f"{IF1}/name", "eno1"), "network.interfaces[1].name"),
    ("management not an IP", _set("management_address", "mgmt"), "management_address"),
    ("management on no interface", _set("management_address", "192.0.2.99"), "management_address"),
    ("storage not a list", _set("storage_addresses", "198.51.100.11"), "storage_addresses"),
    ("storage not an IP", _set("storage_addresses", ["x"]), "storage_addresses[0]"),
    ("storage on no interface", _set("storage_addresses", ["198.51.100.99"]), "storage_addresses[0]"),
    ("storage is management", _set("storage_addresses", ["192.0.2.11"]), "storage_addresses[0]"),
    ("storage twice", _set("storage_addresses", ["198.51.100.11", "198.51.100.11"]), "storage_addresses[1]"),
    ("peer port", _set("peer_port", 70000), "peer_port"),
    ("ntp not a list", _set("ntp", "192.0.2.1"), "ntp"),
    ("ntp entry", _set("ntp", ["192.0.2.1", "bad name!"]), "ntp[1]"),
    ("ntp too many", _set("ntp", [f"10.0.0.{i}" for i in range(17)]), "ntp"),
    ("ssh not a table", _set("ssh", [KEY]), "ssh"),
    ("ssh unknown key", _set("ssh/password", "x"), "ssh.password"),
    ("ssh key type", _set("ssh/authorized_keys/0", "ssh-dss AAAAB3NzaC1kc3M= x"), "ssh.authorized_keys[0]"),
    ("ssh key damaged", _set("ssh/authorized_keys/0", "ssh-ed25519 AAAA!!!! x"), "ssh.authorized_keys[0]"),
    (
        "ssh key of another type",
        _set("ssh/authorized_keys/0", ssh_line("ssh-rsa").replace("ssh-rsa", "ssh-ed25519", 1)),
        "ssh.authorized_keys[0]",
    ),
    (
        "ssh key with options",
        _set("ssh/authorized_keys/0", f'command="/bin/sh" {KEY}'),
        "ssh.authorized_keys[0]",
    ),
    (
        "ssh private key",
        _set("ssh/authorized_keys/0", "-----BEGIN OPENSSH PRIVATE KEY-----"),
        "ssh.authorized_keys[0]",
    ),
    ("ssh two lines", _set("ssh/authorized_keys/0", KEY + "\n" + KEY), "ssh.authorized_keys[0]"),
    ("labels not a table", _set("labels", ["rack=r1"]), "labels"),
    ("label key", _set("labels/Rack", "r1"), "labels.Rack"),
    ("label value", _set("labels/rack", "r 1"), "labels.rack"),
    ("cluster not a table", _set("cluster", "init"), "cluster"),
    ("cluster action", _set("cluster/action", "create"), "cluster.action"),
    ("cluster unknown key", _set("cluster/node_id", 3), "cluster.node_id"),
    ("cluster token inline", _set("cluster/token", "abc"), "cluster.token"),
    ("join without address", _set("cluster/address", _DEL), "cluster.address"),
    ("join address", _set("cluster/address", "198.51.100.10"), "cluster.address"),
    ("join address port", _set("cluster/address", "198.51.100.10:0"), "cluster.address"),
    ("join without token", _set("cluster/token_file", _DEL), "cluster.token_file"),
    ("join with two tokens", _set("cluster/token_credential", "nodeos.join-token"), "cluster.token_file"),
    ("join token_file", _set("cluster/token_file", ""), "cluster.token_file"),
]


@pytest.mark.parametrize(("what", "edit", "field"), CASES, ids=[c[0] for c in CASES])
def test_every_bad_field_is_named_with_what_it_allows(
    what: str, edit: Callable[[dict[str, Any]], None], field: str
) -> None:
    doc = valid()
    edit(doc)
    with pytest.raises(BadInput) as exc:
        parse(doc, "/mnt/cfg")
    err = exc.value
    assert err.field == field, f"{what}: {err.to_dict()}"
    assert err.allowed not in (None, "", []), f"{what}: no allowed values: {err.to_dict()}"
    assert err.code == "bad_input" and err.exit_code == EXIT_BAD_INPUT
    assert err.to_dict()["field"] == field


def test_init_takes_no_join_settings() -> None:
    doc = valid()
    doc["cluster"] = {"action": "init", "address": "198.51.100.10:7100"}
    with pytest.raises(BadInput) as exc:
        parse(doc)
    assert exc.value.field == "cluster.address"
    doc["cluster"] = {"action": "init"}
    plan = parse(doc)
    assert plan.cluster is not None and plan.cluster.action == "init"


def test_a_token_credential_and_a_bad_credential_name() -> None:
    doc = valid()
    doc["cluster"] = {
        "action": "join",
        "address": "[2001:db8::10]:7100",
        "token_credential": "nodeos.join-token",
    }
    plan = parse(doc)
    assert plan.cluster is not None and plan.cluster.token_credential == "nodeos.join-token"
    doc["cluster"]["token_credential"] = "../etc/shadow"
    with pytest.raises(BadInput) as exc:
        parse(doc)
    assert exc.value.field == "cluster.token_credential" and exc.value.allowed


def test_an_inline_token_is_refused_without_echoing_it() -> None:
    doc = valid()
    doc["cluster"]["token"] = "s3cr3t-token-value"
    with pytest.raises(BadInput) as exc:
        parse(doc)
    assert "s3cr3t-token-value" not in str(exc.value.to_dict())


def test_ipv6_storage_gives_a_bracketed_peer_address() -> None:
    doc = {
        "network": {"interfaces": [{"name": "eth1", "addresses": ["2001:db8::11/64"]}]},
        "storage_addresses": ["2001:db8::11"],
        "peer_port": 7200,
    }
    assert parse(doc).peer_listen == "[2001:db8::11]:7200"


def test_the_documented_example_is_a_valid_configuration() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "provisioning.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    plan = parse(tomllib.loads(example), "/run/nodeos-provision/cfg")
    assert plan.hostname == "s1" and plan.cluster is not None and plan.cluster.action == "join"
    assert len(plan.ssh_keys) == 1 and plan.labels == {"rack": "r1", "switch": "sw1"}
