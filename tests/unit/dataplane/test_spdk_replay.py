"""The SPDK data plane against the REPLAY of a real nvmf_tgt (tests/spdk/replay/, docs/testing.md).

The scenario of tests/spdk/replay_scenario.py is run again, step by step, with the product's own
code, against ReplayServer sockets that hold what three real SPDK v26.05 targets answered when it
was recorded (`python -m tests.spdk.record_replay`). For every step:
- the product sends exactly the recorded requests, in the recorded order (method and params);
- given the real answers (errors included) it comes to the same outcome as against the real
  targets: the same return value, or the same nodeos error (class, field, message).
Every SPDK method the product names must be in the replay, or in UNCOVERED with its reason.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spdk import replay_scenario as sc
from tests.unit.dataplane.spdk_replay_server import ReplayServer, load_replay

PROJECT = Path(__file__).resolve().parents[3]
PRODUCT = [
    *sorted((PROJECT / "nodeos" / "dataplane" / "spdk").glob("*.py")),
    PROJECT / "nodeos/dataplane/select.py",
]
METHOD = re.compile(r"^(bdev|nvmf|keyring|framework|spdk|rpc)_[a-z0-9_]+$")

# Methods the product calls whose answers the replay cannot hold, and why (kept exact: a method
# recorded later, or no longer called, fails test_every_product_method_is_replayed until removed).
UNCOVERED: dict[str, str] = {}
# Methods replayed with SPDK's error answers only: their success is not recordable here.
ERRORS_ONLY: dict[str, str] = {
    "bdev_nvme_get_controller_health_info": "PCIe NVMe controllers only: none on the recording machine "
    "(hwtests/spdk reads a real drive's; the fabric controllers' health is not asked)",
    "bdev_aio_create": "test drives only: the AIO bdev's UUID is derived from its file's path, which is "
    "each run's own, so a recorded create could not be replayed; the scenario's drives are malloc bdevs",
}


@pytest.fixture(scope="module")
def replay() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    return load_replay()


def test_the_replay_is_a_recording_of_real_targets(
    replay: tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    header, steps, exchanges = replay
    assert "recorded from real SPDK nvmf_tgt" in header["replay"]
    assert str(header["spdk"]).startswith("SPDK v26.05")
    assert header["steps"] == len(steps) == len(sc.STEPS)
    assert header["exchanges"] == len(exchanges)
    assert header["error_answers"] == sum(1 for e in exchanges if "error" in e["response"]) > 20
    assert [(s["node"], s["name"]) for s in steps] == [(n, name) for n, name, _ in sc.STEPS]
    for e in exchanges:  # each answer is the target's to that very request
        assert e["response"]["id"] == e["request"]["id"] and e["response"]["jsonrpc"] == "2.0"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, ReplayServer]]:
    out = {n: ReplayServer(tmp_path / f"{n}.sock", str(tmp_path)) for n in sc.NODES}
    yield out
    for s in out.values():
        s.close()


def test_the_product_sends_the_recorded_requests_and_reads_the_real_answers(
    replay: tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]],
    servers: dict[str, ReplayServer],
    tmp_path: Path,
) -> None:
    header, steps, exchanges = replay
    c = sc.Ctx(
        work=str(tmp_path),
        ports=dict(header["ports"]),
        sockets={n: str(s.sock_path) for n, s in servers.items()},
        replaying=True,
    )
    failures: list[str] = []
    try:
        for rec, step in zip(steps, sc.STEPS, strict=True):
            for n, srv in servers.items():
                srv.expect([e for e in exchanges if e["step"] == rec["step"] and e["node"] == n])
            got = sc.run_step(step, c)
            where = f"step {rec['step']} {step[0]} {step[1]!r}"
            for n, srv in servers.items():
                if srv.mismatches:
                    want, sent = srv.mismatches[0]
                    failures.append(f"{where}: {n} was sent {_j(sent)}\n  recorded: {_j(want)}")
                if srv.pending:
                    failures.append(f"{where}: {n} never got the recorded {_j(srv.pending[0]['request'])}")
                srv.mismatches.clear()
                srv.pending.clear()
            if got != rec["outcome"]:
                failures.append(f"{where}: outcome {_j(got)}\n  recorded: {_j(rec['outcome'])}")
            if failures:
                break  # what follows builds on this step's state
    finally:
        c.close()
    assert not failures, "\n".join(failures)
    assert sum(s.served for s in servers.values()) == len(exchanges)


def _j(x: Any) -> str:
    return json.dumps(x)[:600]


def product_methods() -> set[str]:
    """Every SPDK JSON-RPC method the product names: the first element of a (method, params)
    request, a `"method":` value, or the first argument of a call()."""
    out: set[str] = set()
    for f in PRODUCT:
        for node in ast.walk(ast.parse(f.read_text())):
            cands: list[ast.expr] = []
            if isinstance(node, ast.Tuple) and len(node.elts) == 2:
                cands.append(node.elts[0])
            elif isinstance(node, ast.Dict):
                cands += [
                    v
                    for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value == "method"
                ]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "call"
            ):
                cands += node.args[:1]
            out |= {
                c.value
                for c in cands
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and METHOD.match(c.value)
            }
    return out


def test_the_method_scan_finds_the_request_builders() -> None:
    found = product_methods()
    assert {
        "bdev_raid_create",
        "bdev_nvme_attach_controller",
        "keyring_file_add_key",
        "nvmf_set_max_subsystems",
        "rpc_get_methods",
        "spdk_get_version",
        "nvmf_discovery_add_referral",
    } <= found
    assert "bdev_name" not in found and "lvs_name" not in found  # parameter names are no methods


def test_every_product_method_is_replayed(
    replay: tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    _, _, exchanges = replay
    recorded = {e["request"]["method"] for e in exchanges}
    missing = product_methods() - recorded
    assert missing == set(UNCOVERED), (
        f"called by the product, not in the replay: {sorted(missing - set(UNCOVERED))}; "
        f"in UNCOVERED but replayed or no longer called: {sorted(set(UNCOVERED) - missing)}"
    )


def test_methods_replayed_with_errors_only_are_listed(
    replay: tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    _, _, exchanges = replay
    answered = {e["request"]["method"] for e in exchanges if "error" not in e["response"]}
    errors_only = product_methods() - answered
    assert errors_only == set(ERRORS_ONLY), f"only error answers recorded: {sorted(errors_only)}"
