"""A request checked against its type: one error shape (code, field, allowed), the console's
messages kept, types refused in the same words for every method."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos import validate
from nodeos.api.check import check_request
from nodeos.api.registry import METHODS
from nodeos.errors import BadInput

HOST = "nqn.2014-08.com.example:gpu1"


def refused(method: str, params: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(BadInput) as exc:
        check_request(METHODS[method], params)
    return exc.value.to_dict()


def test_a_good_request_becomes_its_type_with_defaults() -> None:
    req = check_request(METHODS["volume.create"], {"name": "v1", "size": "1GiB", "replicas": 3})
    assert (req.name, req.size, req.replicas, req.spread, req.wait) == ("v1", "1GiB", 3, None, 100.0)


def test_an_unknown_field_is_ignored_an_added_optional_field_is_compatible() -> None:
    check_request(METHODS["volume.show"], {"name": "v1", "from_a_newer_console": True})


@pytest.mark.parametrize("params", [{}, {"name": None}])
def test_a_missing_field_is_required_by_name(params: dict[str, Any]) -> None:
    assert refused("volume.show", params) == {
        "code": "bad_input",
        "message": "name is required",
        "field": "name",
    }


def test_a_field_with_a_validator_keeps_the_console_message() -> None:
    with pytest.raises(BadInput) as want:
        validate.name("bad name!", "name")
    assert refused("volume.show", {"name": "bad name!"}) == want.value.to_dict()
    with pytest.raises(BadInput) as want:
        validate.size("12 parsecs", "size")
    assert refused("volume.create", {"name": "v", "size": "12 parsecs"}) == want.value.to_dict()


def test_an_error_may_name_the_field_as_the_console_always_has() -> None:
    assert refused("host.remove", {})["field"] == "host"
    assert refused("host.add", {"nqn": "not an nqn"})["field"] == "host"
    err = refused("node.rebuild_limit", {"node": "n1", "mbps": 0})
    assert err["field"] == "rebuild_mbps" and err["allowed"] == "1-100000"


def test_checks_run_in_the_order_the_type_declares() -> None:
    assert refused("volume.create", {"size": "x"})["field"] == "name"
    assert refused("volume.create", {"name": "v", "size": "x"})["field"] == "size"


def test_an_enumeration_names_the_values_allowed() -> None:
    err = refused("volume.create", {"name": "v", "size": "1GiB", "spread": "planet"})
    assert err == {
        "code": "bad_input",
        "message": "spread 'planet' is not one of node, rack, switch",
        "field": "spread",
        "allowed": ["node", "rack", "switch"],
    }


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("volume.delete", {"name": "v", "wait": -1}, "wait must be a number of seconds in [0, 3600]"),
        ("volume.delete", {"name": "v", "wait": True}, "wait must be a number of seconds in [0, 3600]"),
        ("volume.delete", {"name": "v", "force": "yes"}, "force must be true or false"),
        ("cluster.kv.get", {"key": "k", "timeout": 0}, "timeout must be a number of seconds in (0, 300]"),
        ("cluster.kv.get", {"key": ""}, "key must be a non-empty string"),
        ("cluster.remove", {"node_id": -3}, "node_id must be a positive integer"),
        ("cluster.init", {"node_id": "one"}, "node_id must be a positive integer"),
        ("events.list", {"limit": 0}, "limit must be an integer in [1, 10000]"),
        ("events.list", {"follow": 1}, "follow must be true or false"),
        ("node.show", {"node": [1]}, "node must be a node name or id"),
        ("node.label", {"node": "n1", "set": ["a"]}, "labels are KEY=VALUE to set and KEY- to remove"),
        ("cluster.test.fault", {"drop": "all"}, "drop must be a list"),
        ("cluster.secret.rotate", {"timeout": 0.5}, "timeout must be a number of seconds from 1 to 300"),
    ],
)
def test_types_are_refused_in_the_same_words_everywhere(
    method: str, params: dict[str, Any], message: str
) -> None:
    assert refused(method, params)["message"] == message


def test_grants_take_one_host_or_several() -> None:
    check_request(METHODS["volume.grant"], {"name": "v", "host": HOST})
    check_request(METHODS["volume.grant"], {"name": "v", "hosts": [HOST, HOST.replace("1", "2")]})
    assert refused("volume.grant", {"name": "v", "hosts": []})["field"] == "hosts"
