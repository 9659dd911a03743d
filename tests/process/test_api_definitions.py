"""A real nodeosd's dispatcher against the API's definitions (nodeos/api/): it serves exactly the
methods defined (test hooks only with NODEOS_TEST_FAULTS=1), and every request it serves is
checked against its method's type before a handler runs."""

from __future__ import annotations

import pytest

from nodeos.api.registry import METHODS
from nodeos.errors import BadInput
from nodeos.rpc.client import Client

from .conftest import Daemon

pytestmark = pytest.mark.process


def _routes(d: Daemon) -> set[str]:
    """The daemon's whole table: an unknown method is answered with the methods it knows."""
    with pytest.raises(BadInput) as exc:
        Client(str(d.socket)).call("no.such.method")
    assert exc.value.field == "method"
    return set(exc.value.allowed)


def test_the_daemon_serves_exactly_the_defined_methods(shared_daemon: Daemon) -> None:
    want = {m.name for m in METHODS.values() if m.only_with is None}
    assert _routes(shared_daemon) == want
    assert "API methods not defined" not in shared_daemon.log.read_text()


def test_with_test_faults_the_test_hooks_are_there_too(daemon: Daemon) -> None:
    daemon.env["NODEOS_TEST_FAULTS"] = "1"
    daemon.start()
    assert _routes(daemon) == set(METHODS)


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("volume.create", {"name": "v1", "size": "1GiB", "spread": "planet"}, "spread"),
        ("volume.delete", {"name": "v1", "force": "yes"}, "force"),
        ("events.list", {"limit": "many"}, "limit"),
        ("cluster.kv.put", {"key": "k", "value": 1, "timeout": "soon"}, "timeout"),
        ("node.label", {"node": ["n1"], "set": {"rack": "a"}}, "node"),
    ],
)
def test_a_request_its_type_refuses_is_bad_input_naming_the_field_and_changes_nothing(
    shared_daemon: Daemon, method: str, params: dict[str, object], field: str
) -> None:
    before = shared_daemon.cli_json("node", "show", "n1")
    with pytest.raises(BadInput) as exc:
        Client(str(shared_daemon.socket)).call(method, params)
    assert exc.value.code == "bad_input" and exc.value.field == field, exc.value.to_dict()
    assert shared_daemon.cli_json("volume", "list") == []
    assert shared_daemon.cli_json("cluster", "kv", "get", "k")["value"] is None
    assert shared_daemon.cli_json("node", "show", "n1")["labels"] == before["labels"]


def test_replies_have_their_types(shared_daemon: Daemon) -> None:
    """What a method answers converts to its definition's reply type (a reply with fields its
    type does not name is compatible: clients ignore them)."""
    import msgspec

    c = Client(str(shared_daemon.socket))

    def conforms(method: str, params: dict[str, object] | None = None) -> object:
        out = c.call(method, params or {})
        msgspec.convert(out, METHODS[method].reply)
        return out

    for m in METHODS.values():
        if not m.write and m.only_with is None and not msgspec.structs.fields(m.request):
            conforms(m.name)
    conforms("cluster.kv.put", {"key": "typed", "value": "a"})
    conforms("cluster.kv.get", {"key": "typed"})
    conforms("cluster.kv.cas", {"key": "typed", "expect": "b", "value": "c"})  # refused: no revision
    conforms("cluster.kv.cas", {"key": "typed", "expect": "a", "value": "c"})
    made = conforms("auth.token.create", {"role": "read-only"})
    conforms("auth.token.list")
    conforms("auth.token.revoke", {"token_id": made["token_id"]})  # type: ignore[index]
    conforms("events.list", {"since": 0})
