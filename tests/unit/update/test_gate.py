"""The health gate's decisions and its bound (nodeos/update/gate.py), and its unit's wiring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodeos.update import gate

UNIT = Path(__file__).resolve().parents[3] / "systemd" / "nodeos-health-gate.service"


def _status(**cluster: Any) -> dict[str, Any]:
    return {"health": {"ok": True, "failures": {}}, "cluster": cluster}


def test_passes_once_ready_and_back_in_the_cluster() -> None:
    member = {"member": True, "cluster_id": "c1", "role": "follower"}
    assert gate.assess("activating", None)[0] == "wait"
    assert gate.assess("active", _status(**member))[0] == "wait"  # no leader known yet
    verdict, why = gate.assess("active", _status(**member, leader=2))
    assert verdict == "pass" and "back in cluster c1" in why
    assert gate.assess("active", _status(member=False))[0] == "pass"
    assert gate.assess("active", _status(member=True, solo=True, cluster_id="c1"))[0] == "pass"


def test_fails_when_nodeosd_or_the_cluster_service_failed() -> None:
    assert gate.assess("failed", None) == ("fail", "nodeosd failed (systemd stopped restarting it)")
    verdict, why = gate.assess("active", _status(member=True, role="failed", failure="bad map"))
    assert verdict == "fail" and "bad map" in why


def test_fails_when_nodeosd_keeps_failing_to_start() -> None:
    assert gate.assess("activating", None, restarts=gate.MAX_FAILED_STARTS - 1)[0] == "wait"
    verdict, why = gate.assess("activating", None, restarts=gate.MAX_FAILED_STARTS)
    assert verdict == "fail" and f"failed to start {gate.MAX_FAILED_STARTS} times" in why
    member = _status(member=True, cluster_id="c1", leader=2)
    assert gate.assess("active", member, restarts=5)[0] == "pass", "it started in the end"


def test_waits_while_the_daemon_reports_failures() -> None:
    st = {"health": {"ok": False, "failures": {"agent": "stuck"}}, "cluster": {"member": True, "leader": 1}}
    verdict, why = gate.assess("active", st)
    assert verdict == "wait" and "agent: stuck" in why


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_bound_fails_the_gate_naming_the_last_reason() -> None:
    clock, said = _Clock(), []
    ok = gate.run(
        lambda: ("active", _status(member=True, cluster_id="c1")),
        bound_s=30,
        poll_s=2,
        clock=clock,
        sleep=clock.sleep,
        say=said.append,
    )
    assert ok is False and 30 <= clock.t <= 32
    assert said[-1].startswith("health gate: FAILED after 30 s: not back in cluster c1")


def test_a_node_that_gets_there_in_time_passes() -> None:
    clock, said = _Clock(), []
    states = iter([("activating", None)] * 5 + [("active", _status(member=True, leader=1, cluster_id="c"))])
    assert gate.run(lambda: next(states), bound_s=30, clock=clock, sleep=clock.sleep, say=said.append)
    assert said == ["health gate: nodeosd is not ready yet (activating)", said[-1]]
    assert "back in cluster c" in said[-1]


def test_the_unit_gates_boot_complete_only_on_a_counted_boot_and_reboots_on_failure() -> None:
    text = UNIT.read_text()
    assert "Before=boot-complete.target" in text and "RequiredBy=boot-complete.target" in text
    assert "ConditionPathExists=/sys/firmware/efi/efivars/LoaderBootCountPath-" in text
    assert "FailureAction=reboot" in text and "After=nodeosd.service" in text
    timeout = int(text.split("TimeoutStartSec=")[1].split()[0])
    assert timeout > gate.GATE_BOUND_S  # the gate says why before systemd kills it
