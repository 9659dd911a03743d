"""The API's definitions (nodeos/api/) walked whole: every method is defined once, has a type
msgspec can check and describe, and has its console command (or says why it has none)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil
from typing import Any

import click
import msgspec
import pytest

import nodeos.api
from nodeos.api import openapi, reference, registry
from nodeos.api.spec import Method, NoParams
from nodeos.cli.main import SUBCOMMANDS, _load

METHODS = sorted(registry.METHODS.values(), key=lambda m: m.name)


def test_a_method_defined_twice_is_refused() -> None:
    m = registry.METHODS["status"]
    with pytest.raises(RuntimeError, match="defined twice"):
        registry._table((m,), (m,))


@pytest.mark.parametrize("m", METHODS, ids=lambda m: m.name)
def test_every_request_and_reply_type_can_be_checked_and_described(m: Method) -> None:
    msgspec.json.schema(m.request)
    msgspec.json.schema(m.reply)
    # Builds the decoder: a constraint msgspec cannot hold fails here, not at a request.
    with contextlib.suppress(msgspec.ValidationError):
        msgspec.convert({}, m.request)
    assert m.since >= 1 and m.since <= registry.API_VERSION
    assert m.runs in ("node", "leader")
    assert {"bad_input", "failed"} <= set(m.all_errors)
    if m.runs == "leader":
        assert {"not_leader", "unknown_outcome"} <= set(m.all_errors)


# The methods the REST endpoint does not serve: test hooks, there only with NODEOS_TEST_FAULTS=1.
NOT_SERVED = {"cluster.test.fault", "cluster.test.host_keys"}


def _defined() -> list[str]:
    """Every method name as the area modules of nodeos/api/ define it, duplicates kept."""
    names = []
    for info in pkgutil.iter_modules(nodeos.api.__path__):
        group = getattr(importlib.import_module(f"nodeos.api.{info.name}"), "METHODS", None)
        if isinstance(group, tuple):
            names += [m.name for m in group]
    return names


def test_every_definition_once_with_its_console_command_rest_route_and_reference_entry() -> None:
    """The walk over the definitions: each method is defined once (in every area module, not just
    in the registry's table), has its console command or says why not, is served at its REST
    route with an operation in the OpenAPI document (test hooks alone are not), and has one entry
    in docs/api.md."""
    defined = _defined()
    twice = sorted({n for n in defined if defined.count(n) > 1})
    assert not twice, f"defined twice: {twice}"
    assert sorted(defined) == sorted(registry.METHODS), "an area's METHODS is missing from registry._table"
    routes = {m.name: path for path, m in openapi.routes().items()}
    paths = openapi.document()["paths"]
    doc = reference.DOC.read_text()
    for m in METHODS:
        if m.console is not None:
            _command(m.console.split(" --")[0].split())
        else:
            assert m.why_no_console, m.name
        if m.name in NOT_SERVED:
            assert m.name not in routes and m.only_with is not None, m.name
        else:
            assert m.name in routes, f"{m.name} has no REST route"
            assert paths[routes[m.name]]["post"]["operationId"], m.name
        assert doc.count(f"### `{m.name}`\n") == 1, f"{m.name}: not once in docs/api.md"


def _command(words: list[str]) -> click.Command:
    cmd: Any = _load(words[0])
    assert cmd is not None, f"no console command {words[0]!r} ({sorted(SUBCOMMANDS)})"
    for w in words[1:]:
        assert isinstance(cmd, click.Group), f"{cmd.name} has no subcommand {w!r}"
        cmd = cmd.commands.get(w)
        assert cmd is not None, f"no console command {' '.join(words)!r}"
    return cmd  # type: ignore[no-any-return]


@pytest.mark.parametrize("m", [m for m in METHODS if m.console is not None], ids=lambda m: m.name)
def test_every_method_has_its_console_command_and_that_command_calls_it(m: Method) -> None:
    assert m.console is not None
    words = m.console.split(" --")[0].split()
    cmd = _command(words)
    assert cmd.callback is not None
    option = m.console.split(" --")[1] if " --" in m.console else None
    if option is not None:
        assert any(f"--{option}" in p.opts for p in cmd.params), f"{m.console}: no option --{option}"
    source = inspect.getsource(inspect.getmodule(inspect.unwrap(cmd.callback)))  # type: ignore[arg-type]
    assert f'"{m.name}"' in source, f"`nodeos {m.console}` does not call {m.name}"


def test_methods_without_a_console_command_say_why() -> None:
    hidden = {m.name: m.why_no_console for m in METHODS if m.console is None}
    assert hidden and all(hidden.values())
    assert set(hidden) == {
        "daemon.ping",
        "node.reconcile",
        "node.crash_points",
        "cluster.test.fault",
        "cluster.test.host_keys",
    }


def test_no_console_command_is_claimed_by_two_methods_except_an_option_of_one() -> None:
    seen: dict[str, str] = {}
    for m in METHODS:
        if m.console is not None:
            assert m.console not in seen, f"{m.name} and {seen[m.console]} both claim `nodeos {m.console}`"
            seen[m.console] = m.name


def test_the_control_service_routes_are_exactly_its_definitions() -> None:
    """The dispatcher's table for the control plane, built as nodeosd builds it (the whole table of
    a running daemon: tests/process/test_api_definitions.py)."""
    from nodeos.control.service import ControlService

    routes = set(ControlService(ctx=None).methods())  # type: ignore[arg-type]
    defined = {m.name for m in METHODS if m.name.split(".")[0] in ("drive", "pool", "volume", "host")}
    defined |= {"node.list", "node.show", "node.label", "node.drain", "node.undrain", "node.rebuild_limit"}
    assert routes == defined


def test_no_params_is_no_params() -> None:
    assert msgspec.structs.fields(NoParams) == ()


def test_the_wait_default_is_the_control_planes() -> None:
    from nodeos.api.storage import VolumeCreate
    from nodeos.control.params import DEFAULT_WAIT_S

    assert VolumeCreate(name="v", size=1).wait == DEFAULT_WAIT_S


def test_the_leaders_tables_agree_with_the_definitions() -> None:
    """decide.WRITES and reads.READS (what the leader runs) name defined methods that run at the
    leader, writes as writes and reads as reads (the per-operation tables are still the control
    plane's; issue 26 folds them into one spec per operation later)."""
    from nodeos.control import decide
    from nodeos.control.reads import READS

    for op in decide.WRITES:
        m = registry.METHODS[op]
        assert m.write and m.runs == "leader", op
    assert set(decide.WRITES) >= decide.NEEDS_ID
    for op in READS:
        m = registry.METHODS[op]
        assert not m.write and m.runs == "leader", op
