"""Crash safety of replicated volumes: nodeosd killed (NODEOS_CRASH_AT -> os._exit(137), like
kill -9) at a step of create or delete of a 2-replica volume, on the primary and on the replica
node; after every daemon is restarted, exactly the right objects exist everywhere: the map's
volume ready with both replicas in-sync (create) or gone (delete), and on each node exactly its
data plane objects (LV, front-end and replica subsystems, md mirror, linear view, the
primary's connections to the replica) and nothing else, no intent left pending.

The volume is pinned to s1 and s2 (only they have a pool), so s3 is the cluster's third vote and
must end with nothing. Every daemon runs with the same crash point: create and delete steps
are passed by both replica nodes, `volume.replica:*` by the secondary only, `volume.mirror:*`
by the primary only, and exactly those must have crashed.

The whole matrix takes over an hour under TCG, more than CI's budget: CI runs CI_STEPS (the
primary alone killed in assembly); NODEOS_LAB_FULL=1 runs every step (tests/lab/shared_labs.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from nodeos.dataplane import mirror_names as names
from nodeos.node import crash
from nodeos_devtools.lab import Lab
from tests.lab import shared_labs
from tests.lab.node_helpers import (
    CRASH_LOG,
    nodeos,
    ok,
    start_crashing_daemon,
    start_unit,
    wait_daemon,
    wait_dead,
)
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

# With NODEOS_LAB_FULL=1 only for now (CI's 60 minutes; its create had been refused since probe 6,
# unchecked: the step has not yet run to its end with the fix).
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")
REPLICA_NODES = ("s1", "s2")
OPS = ("volume.create", "volume.replica", "volume.mirror", "volume.delete")
# A replicated volume's create makes the LV only (volume.replica / volume.mirror export it): it
# never passes volume.create:export-applied, which the single-node crash tests cover.
NOT_PASSED = {"volume.create:export-applied"}
ALL_STEPS = [f"{op}:{step}" for op in OPS for step in crash.STEPS[op] if f"{op}:{step}" not in NOT_PASSED]
CI_STEPS = [
    "volume.mirror:mirror-assembled",  # primary: md assembled, front end not exported
    # The rest runs with NODEOS_LAB_FULL=1 only: CI's 60 minutes went to the failover tests.
    # create:volume-created (both nodes killed, LV made, nothing exported) replays the same
    # create intent the single-node crash tests cover in CI; delete replays its intent as create does.
]
STEPS = shared_labs.steps(ALL_STEPS, CI_STEPS)


def _each(fn: Callable[[str], Any], vms: tuple[str, ...] = STORAGE) -> dict[str, Any]:
    """fn(vm) on every vm at once (daemon starts under TCG are slow: do them side by side)."""
    with ThreadPoolExecutor(len(vms)) as pool:
        return dict(zip(vms, pool.map(fn, vms), strict=True))


@pytest.fixture(scope="module")
def pools(lab: Lab) -> Iterator[None]:
    for vm in STORAGE:
        wait_daemon(lab, vm)
    for vm in REPLICA_NODES:
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    yield
    for vm in REPLICA_NODES:
        rc, out = nodeos(lab, vm, "pool", "delete", "p")
        assert rc == 0 or (rc == 2 and out["error"]["code"] == "not_found"), out
    # The shared lab as found: no pool left in the map or on the nodes' drives.
    deadline = time.monotonic() + 300
    while ok(lab, "s3", "pool", "list") or any(_objects(lab, vm)["lvs"] for vm in REPLICA_NODES):
        assert time.monotonic() < deadline, "pools not gone from the map and the nodes"
        time.sleep(3)


def _restart_units(lab: Lab) -> None:
    def one(vm: str) -> None:
        lab.sh(vm, "pkill -9 -x nodeosd || true")
        wait_dead(lab, vm)
        start_unit(lab, vm)

    _each(one)


def _crashed(lab: Lab, step: str) -> set[str]:
    r = _each(lambda vm: lab.exec(vm, ["grep", "-q", f"crash injected at {step} ", CRASH_LOG]).rc == 0)
    return {vm for vm, hit in r.items() if hit}


def _wait_crashed(lab: Lab, step: str, want: set[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while (got := _crashed(lab, step)) != want:
        assert time.monotonic() < deadline and got <= want, f"crashed at {step}: {got}, wanted {want}"
        time.sleep(3)


OBJECTS_SCRIPT = """
lvs --noheadings -o lv_name,segtype 2>/dev/null | awk '$2 == "thin" {print $1}'
echo @@
ls /sys/kernel/config/nvmet/subsystems 2>/dev/null | grep -v discovery-anchor || true
echo @@
ls /dev/md 2>/dev/null || true
echo @@
dmsetup ls 2>/dev/null | awk '{print $1}' | grep '^nodeos-view-' || true
echo @@
cat /sys/class/nvme-subsystem/*/subsysnqn 2>/dev/null | grep '^nqn.2014-08.io.nodeos:' || true
echo @@
nodeos status --json \
  | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["node"]["pending_intents"]))' || echo unknown
"""


def _objects(lab: Lab, vm: str) -> dict[str, set[str]]:
    parts = lab.sh(vm, OBJECTS_SCRIPT, timeout=300).stdout.split("@@\n")
    # connected: our fabric connections only (the VM's own emulated drives are NVMe subsystems too)
    keys = ("lvs", "subsystems", "md", "views", "connected", "pending")
    return {k: set(p.split()) for k, p in zip(keys, parts, strict=True)}


def _expected(vol: dict[str, Any] | None) -> dict[str, dict[str, set[str]]]:
    """What each node must hold: the volume's objects by role, or nothing at all."""
    empty = {"lvs": set(), "subsystems": set(), "md": set(), "views": set(), "connected": set()}
    out = {vm: {k: set(v) for k, v in empty.items()} for vm in STORAGE}
    if vol is None:
        return out
    mirror = names.mirror_id_for(vol["uuid"])
    for r in vol["replicas"]:
        mine = out[r["node"]]
        mine["lvs"] = {f"v_{vol['vol_id']}"}
        mine["subsystems"] = {vol["nqn"]}
        if r["node"] == vol["primary"]:
            mine["md"] = {mirror}
            mine["connected"] = {
                names.replica_nqn(vol["uuid"], str(s["node_id"]))
                for s in vol["replicas"]
                if s["node"] != vol["primary"]
            }
        else:
            mine["subsystems"].add(names.replica_nqn(vol["uuid"], str(r["node_id"])))
            mine["views"] = {names.VIEW_PREFIX + names.view_id_for(mirror)}
    return out


def _settled(lab: Lab, name: str, present: bool, timeout: float = 600) -> dict[str, Any] | None:
    """Wait (bounded) until the map says NAME is ready with every replica in-sync (present) or
    gone, then return its volume view."""
    deadline = time.monotonic() + timeout
    while True:
        rc, v = nodeos(lab, "s3", "volume", "show", name)
        if present and rc == 0 and v["state"] == "ready":
            assert all(r["state"] == "in-sync" for r in v["replicas"]), v
            return v
        if not present and rc == 2 and isinstance(v, dict) and v["error"]["code"] == "not_found":
            return None
        assert time.monotonic() < deadline, f"{name} not {'ready' if present else 'gone'}: {v}"
        time.sleep(3)


def _assert_exactly(lab: Lab, vol: dict[str, Any] | None, timeout: float = 300) -> None:
    """Every node holds exactly its objects (the agents finish what recovery left: bounded)."""
    want = _expected(vol)
    deadline = time.monotonic() + timeout
    while True:
        have = _each(lambda vm: _objects(lab, vm))
        # Only our own objects count: other modules leave nothing (checked after each module).
        got = {vm: {k: v for k, v in h.items() if k != "pending"} for vm, h in have.items()}
        pending = {vm: h["pending"] for vm, h in have.items()}
        if got == want and all(p == {"0"} for p in pending.values()):
            return
        assert time.monotonic() < deadline, f"objects: {got}\nwanted: {want}\npending intents: {pending}"
        time.sleep(3)


@pytest.mark.parametrize("step", STEPS)
def test_kill_at_a_step_of_a_replicated_volume_leaves_exactly_the_right_objects(
    lab: Lab, pools: None, step: str
) -> None:
    op = step.split(":")[0]
    name = "c" + str(ALL_STEPS.index(step))
    deleting = op == "volume.delete"
    if deleting:
        ok(lab, "s3", "volume", "create", name, "--size", "64MiB", "--replicas", "2")
    try:
        try:
            _each(lambda vm: start_crashing_daemon(lab, vm, step))
            if deleting:
                nodeos(lab, "s3", "volume", "delete", name)  # committed at once; the agents crash
            else:
                # --timeout 0: the create is committed; its replica nodes are about to crash.
                args = ("--size", "64MiB", "--replicas", "2", "--timeout=0")
                rc, out = nodeos(lab, "s3", "volume", "create", name, *args)
                # Committed, or maybe (the leader crashed before it answered): anything else
                # means the step under test never ran, which must not pass as a crash's outcome.
                maybe = rc != 0 and isinstance(out, dict) and out["error"]["code"] == "unknown_outcome"
                assert rc == 0 or maybe, f"volume create {name} -> {rc}: {out}"
            if op in ("volume.create", "volume.delete"):
                want = set(REPLICA_NODES)
            else:  # one replica node crashes, the other and s3 still form a majority: ask the map
                v = _settled_placement(lab, name)
                want = {v["primary"]} if op == "volume.mirror" else set(REPLICA_NODES) - {v["primary"]}
            _wait_crashed(lab, step, want)
        finally:
            _restart_units(lab)
        vol = _settled(lab, name, present=not deleting)
        _assert_exactly(lab, vol)
    except BaseException:
        # A failed step leaves no volume behind: every later step checks that the nodes hold
        # exactly its own volume's objects, and would fail on this one's.
        with contextlib.suppress(Exception):
            nodeos(lab, "s3", "volume", "delete", name, "--force")
            _settled(lab, name, present=False, timeout=300)
        raise
    if not deleting:
        ok(lab, "s3", "volume", "delete", name)
        _settled(lab, name, present=False)
        _assert_exactly(lab, None)


def _settled_placement(lab: Lab, name: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        rc, v = nodeos(lab, "s3", "volume", "show", name)
        if rc == 0:
            return v
        assert time.monotonic() < deadline, f"volume show {name}: {v}"
        time.sleep(2)
