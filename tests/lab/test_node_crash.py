"""Crash safety: nodeosd killed (NODEOS_CRASH_AT -> os._exit(137), like kill -9) at every step
of volume create, delete, snapshot and grant; after a restart exactly the right objects exist
in nodeosd's records AND in the kernel data plane (LVs, nvmet subsystems): nothing leaked,
nothing lost. Policy (docs/operations.md): create/delete/grant roll forward, snapshot rolls back.

CI runs one step per recovery branch (CI_STEPS); NODEOS_LAB_FULL=1 runs every step."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from nodeos.dataplane.kernel.lvm import LV_PREFIX
from nodeos.node import crash
from nodeos_devtools.lab import Lab
from tests.lab import shared_labs
from tests.lab.node_helpers import (
    node_state,
    nodeos,
    ok,
    start_crashing_daemon,
    start_unit,
    wait_daemon,
    wait_dead,
)

# With NODEOS_LAB_FULL=1 since 2026-11-29 (CI's 60 minutes; ~4.5 min of lab for its two CI
# steps): in CI the process tier kills daemons mid-operation (tests/process/test_daemon_state.py,
# test_cluster_ready_crash.py) and tests/unit/node/test_ops_recovery.py replays intents.
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not shared_labs.LAB_FULL, reason=shared_labs.NOT_FULL)]
LAB = "one"  # shared (tests/lab/shared_labs.py)
# One step per recovery policy: a create rolls forward, a snapshot rolls back. Delete and grant
# roll forward through the same intent replay as create (~100 s each of CI's 60 min): with
# NODEOS_LAB_FULL=1, with every other step.
CI_STEPS: dict[str, list[str]] = {
    "volume.create": ["volume-created"],  # LV only (export-applied: the grant case's branch)
    "volume.delete": [],  # full: export-removed (unexported, LV still there)
    "volume.snapshot": ["snapshot-created"],  # taken, not committed: rolled back
    "volume.grant": [],  # full: export-applied (host allowed, record not final)
}


def _steps(op: str) -> list[str]:
    return shared_labs.steps(list(crash.STEPS[op]), CI_STEPS[op])


@pytest.fixture(scope="module")
def s1(lab: Lab) -> Iterator[str]:
    wait_daemon(lab, "s1")
    ok(lab, "s1", "pool", "create", "p1", "--drives", "all")
    ok(lab, "s1", "host", "add", lab.spec("h1").hostnqn)
    yield "s1"
    # The lab is shared: leave s1 as it was found.
    ok(lab, "s1", "host", "remove", lab.spec("h1").hostnqn)
    ok(lab, "s1", "pool", "delete", "p1")


def _crash_then_restart(lab: Lab, vm: str, step: str, *args: str) -> None:
    try:
        start_crashing_daemon(lab, vm, step)
        rc, out = nodeos(lab, vm, *args)
        assert rc == 1, f"the command should have lost its daemon at {step}: {out}"
        wait_dead(lab, vm)
        assert "crash injected at " + step in lab.sh(vm, "cat /tmp/nodeosd-crash.log").stdout
    finally:
        # Whatever happened above, the unit runs again (recovery before READY=1): the next
        # tests and the module's clean-up need their daemon.
        lab.sh(vm, "pkill -9 -x nodeosd || true")
        wait_dead(lab, vm)
        start_unit(lab, vm)


def _expect(lab: Lab, vm: str, ready: set[str], timeout: float = 300) -> list[dict]:
    """Exactly these volumes/snapshots, all ready, each with its LV (and subsystem for
    volumes), no other LV or subsystem, no pending intent. The map learns what recovery
    finished from the node's agent report after READY: wait for it, bounded."""
    deadline = time.monotonic() + timeout
    while True:
        vols, status, lvs, subs = node_state(lab, vm)
        if {v["name"]: v["state"] for v in vols} == dict.fromkeys(
            ready, "ready"
        ) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert {v["name"]: v["state"] for v in vols} == dict.fromkeys(ready, "ready")
    assert status["node"]["pending_intents"] == []
    assert lvs == {LV_PREFIX + v["vol_id"] for v in vols}
    assert subs == {v["nqn"] for v in vols if v["kind"] != "snapshot"}
    return vols


@pytest.mark.parametrize("step", _steps("volume.create"))
def test_crash_during_create_rolls_forward(lab: Lab, s1: str, step: str) -> None:
    _crash_then_restart(lab, s1, f"volume.create:{step}", "volume", "create", "cv", "--size", "64MiB")
    _expect(lab, s1, {"cv"})
    ok(lab, s1, "volume", "delete", "cv")


@pytest.mark.parametrize("step", _steps("volume.delete"))
def test_crash_during_delete_rolls_forward(lab: Lab, s1: str, step: str) -> None:
    ok(lab, s1, "volume", "create", "dv", "--size", "64MiB")
    _crash_then_restart(lab, s1, f"volume.delete:{step}", "volume", "delete", "dv")
    _expect(lab, s1, set())


@pytest.mark.parametrize("step", _steps("volume.snapshot"))
def test_crash_during_snapshot_rolls_back(lab: Lab, s1: str, step: str) -> None:
    ok(lab, s1, "volume", "create", "sv", "--size", "64MiB")
    _crash_then_restart(lab, s1, f"volume.snapshot:{step}", "volume", "snapshot", "sv", "ss")
    # Committed before the crash ("done"): the snapshot is kept; otherwise it is undone.
    _expect(lab, s1, {"sv", "ss"} if step == "done" else {"sv"})
    if step == "done":
        ok(lab, s1, "volume", "delete", "ss")
    ok(lab, s1, "volume", "delete", "sv")


@pytest.mark.parametrize("step", _steps("volume.grant"))
def test_crash_during_grant_rolls_forward(lab: Lab, s1: str, step: str) -> None:
    host = lab.spec("h1").hostnqn
    ok(lab, s1, "volume", "create", "gv", "--size", "64MiB")
    _crash_then_restart(lab, s1, f"volume.grant:{step}", "volume", "grant", "gv", "--host", host)
    (v,) = _expect(lab, s1, {"gv"})
    assert v["hosts"] == [host]
    allowed = lab.sh(s1, f"ls /sys/kernel/config/nvmet/subsystems/{v['nqn']}/allowed_hosts").stdout.split()
    assert allowed == [host]
    # A granted volume counts as possibly connected on the kernel target: revoke, then delete.
    ok(lab, s1, "volume", "revoke", "gv", "--host", host)
    ok(lab, s1, "volume", "delete", "gv")
