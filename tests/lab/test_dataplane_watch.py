"""A data plane that dies under a running nodeosd is reported, and re-exported when it returns
(issues 10 and 9; nodeos/node/dpwatch.py). Kernel data plane: nvmet is emptied and unloaded
behind the daemon (what a crashed target leaves), then loaded again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodeos_devtools.lab import Lab
from tests.lab.dataplane_helpers import (
    connect,
    device_of,
    disconnect,
    discover,
    read_sum,
    wait_for,
    write_random,
)
from tests.lab.node_helpers import ok, subsystems, wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

# With NODEOS_LAB_FULL=1 since 2026-11-29 (CI's 60 minutes; ~2 min of lab): in CI the data
# plane watch's decisions are unit tests (tests/unit/node/test_dpwatch.py).
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
LAB = "one"  # shared (tests/lab/shared_labs.py): s1 with 2 drives, h1, h2
DETECT_BOUND_S = 5.0  # nodeos/node/dpwatch.py BOUND_S, documented in docs/operations.md

# Everything nvmet holds, removed in the order configfs allows, then the modules unloaded. The
# daemon is paused meanwhile (SIGSTOP), so it cannot re-export half-way; it resumes with nvmet gone.
UNLOAD_NVMET = """
pid=$(systemctl show -p MainPID --value nodeosd.service)
kill -STOP "$pid"
trap 'kill -CONT "$pid"' EXIT
cd /sys/kernel/config/nvmet
for l in ports/*/subsystems/*; do if [ -L "$l" ]; then rm "$l"; fi; done
for r in ports/*/referrals/*; do if [ -d "$r" ]; then rmdir "$r"; fi; done
for g in ports/*/ana_groups/*; do if [ "${g##*/}" != 1 ] && [ -d "$g" ]; then rmdir "$g"; fi; done
for p in ports/*; do if [ -d "$p" ]; then rmdir "$p"; fi; done
for s in subsystems/*; do
  [ -d "$s" ] || continue
  for h in "$s"/allowed_hosts/*; do if [ -L "$h" ]; then rm "$h"; fi; done
  for n in "$s"/namespaces/*; do if [ -d "$n" ]; then rmdir "$n"; fi; done
  rmdir "$s"
done
for h in hosts/*; do if [ -d "$h" ]; then rmdir "$h"; fi; done
cd /
modprobe -r nvmet_tcp
modprobe -r nvmet_rdma 2>/dev/null || true
modprobe -r nvmet
test ! -d /sys/kernel/config/nvmet
kill -CONT "$pid"
date +%s.%N
"""


@pytest.fixture(scope="module")
def v1(lab: Lab) -> Iterator[dict[str, Any]]:
    wait_daemon(lab, "s1")
    host = lab.spec("h1").hostnqn
    ok(lab, "s1", "pool", "create", "p1", "--drives", "all")
    ok(lab, "s1", "host", "add", host)
    ok(lab, "s1", "volume", "create", "v1", "--size", "64MiB")
    ok(lab, "s1", "volume", "grant", "v1", "--host", host)
    yield ok(lab, "s1", "volume", "show", "v1")
    lab.sh("s1", "modprobe nvmet nvmet_tcp nvmet_rdma 2>/dev/null || modprobe nvmet nvmet_tcp")
    disconnect(lab, "h1", ok(lab, "s1", "volume", "show", "v1")["nqn"])
    ok(lab, "s1", "volume", "delete", "v1", "--force")
    ok(lab, "s1", "host", "remove", host)
    ok(lab, "s1", "pool", "delete", "p1")


def _events(lab: Lab, kind: str) -> list[dict[str, Any]]:
    return [e for e in ok(lab, "s1", "events")["events"] if e["kind"] == kind]


def test_a_dead_target_is_reported_and_reexported_when_it_returns(lab: Lab, v1: dict[str, Any]) -> None:
    addr = lab.addr("s1")
    connect(lab, "h1", "tcp", addr, v1["nqn"])
    written = write_random(lab, "h1", device_of(lab, "h1", v1["nqn"]), 4)
    disconnect(lab, "h1", v1["nqn"])
    want = subsystems(lab, "s1")
    assert v1["nqn"] in want and not _events(lab, "dataplane_down")

    killed = float(lab.sh("s1", UNLOAD_NVMET, timeout=120).stdout.split()[-1])
    wait_for(
        "status says the data plane is down",
        lambda: ok(lab, "s1", "status")["node"]["dataplane_health"]["state"] == "down",
        timeout=60,
    )
    st = ok(lab, "s1", "status")["node"]["dataplane_health"]
    detected = time.time()
    assert "nvmet is gone" in st["reason"] and killed - 1 <= st["since"] <= killed + DETECT_BOUND_S
    human = lab.sh("s1", "nodeos status").stdout
    assert "DOWN      data plane since" in human and "nvmet is gone" in human
    wait_for("the map's event log says down", lambda: _events(lab, "dataplane_down"), timeout=60)
    vol = ok(lab, "s1", "volume", "show", "v1")
    assert vol["available"] is False and "data plane" in vol["unavailable"]
    assert [r["state"] for r in vol["replicas"]] == ["failed"]
    assert ok(lab, "s1", "status")["control"]["lease"]["withheld"]  # no lease renewal while down

    lab.sh("s1", "modprobe nvmet nvmet_tcp; modprobe nvmet_rdma 2>/dev/null || true")
    wait_for("exports re-applied", lambda: subsystems(lab, "s1") == want, timeout=120)
    wait_for(
        "status says up",
        lambda: ok(lab, "s1", "status")["node"]["dataplane_health"]["state"] == "up",
        timeout=60,
    )
    wait_for("the map's event log says up", lambda: _events(lab, "dataplane_up"), timeout=60)
    wait_for(
        "v1 available again", lambda: ok(lab, "s1", "volume", "show", "v1")["available"] is True, timeout=60
    )
    assert v1["nqn"] in discover(lab, "h1", addr, "8009")
    connect(lab, "h1", "tcp", addr, v1["nqn"])
    assert read_sum(lab, "h1", device_of(lab, "h1", v1["nqn"]), 4) == written
    took = f"status read {detected - killed:.1f} s after"
    print(f"down since {st['since'] - killed:.1f} s after the unload ({took})")
