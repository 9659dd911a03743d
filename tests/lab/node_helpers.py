"""Helpers for the node lab tests: the `nodeos` CLI inside a storage VM, and what the data
plane really holds (LVs in our volume groups, nvmet subsystems in configfs)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from nodeos_devtools.lab import Lab


def nodeos(lab: Lab, vm: str, *args: str, timeout: float = 300) -> tuple[int, Any]:
    """Run `nodeos ARGS --json` in vm: (exit code, parsed JSON or the raw text)."""
    r = lab.exec(vm, ["nodeos", *args, "--json"], timeout=timeout)
    try:
        return r.rc, json.loads(r.stdout)
    except ValueError:
        return r.rc, r.stdout + r.stderr


def ok(lab: Lab, vm: str, *args: str, timeout: float = 300) -> Any:
    rc, out = nodeos(lab, vm, *args, timeout=timeout)
    assert rc == 0, f"nodeos {' '.join(args)} -> {rc}: {out}" + _daemon_gone(lab, vm, out)
    return out


def _daemon_gone(lab: Lab, vm: str, out: Any) -> str:
    """Where the daemon could not be reached: what systemd and its journal say of it, in the
    failure itself (a CI log may be all there is to read)."""
    if not (isinstance(out, dict) and out.get("error", {}).get("field") == "socket"):
        return ""
    r = lab.sh(
        vm,
        "systemctl show nodeosd -p ActiveState -p SubState -p NRestarts -p ExecMainStatus "
        "-p ExecMainStartTimestamp; journalctl -b -u nodeosd -o short-monotonic --no-pager "
        "| grep -E 'systemd|Traceback|Error|CRITICAL|watchdog|ready:|signal' | tail -n 25",
        timeout=60,
        check=False,
    )
    return f"\n--- nodeosd on {vm}:\n{r.stdout}{r.stderr}"


def subsystems(lab: Lab, vm: str) -> set[str]:
    r = lab.sh(vm, "ls /sys/kernel/config/nvmet/subsystems 2>/dev/null || true")
    return {s for s in r.stdout.split() if s.startswith("nqn.2014-08.io.nodeos:vol:")}


def logical_volumes(lab: Lab, vm: str) -> set[str]:
    """Thin LVs (volumes, snapshots, clones) in every VG, pool LVs left out."""
    r = lab.sh(vm, "lvs --noheadings -o lv_name,segtype 2>/dev/null || true")
    out = set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "thin":
            out.add(parts[0])
    return out


def wait_daemon(lab: Lab, vm: str, timeout: float = 600) -> None:
    """Until the daemon answers `status` (after a (re)start)."""
    lab.sh(
        vm,
        "t=0; until nodeos status --json >/dev/null 2>&1; do t=$((t+1)); "
        f"[ $t -gt {int(timeout)} ] && exit 1; sleep 1; done",
        timeout=timeout + 30,
    )


CRASH_LOG = "/tmp/nodeosd-crash.log"  # the hand-started daemon's output


def start_crashing_daemon(lab: Lab, vm: str, step: str) -> None:
    """nodeosd by hand (the unit stopped, so systemd does not restart it into a crash loop),
    with NODEOS_CRASH_AT set, on the unit's state dir and socket."""
    lab.sh(vm, "systemctl stop nodeosd.service", timeout=300)
    # Ready when it logs its ready line (polling the log costs nothing; polling `nodeos status`
    # would start a Python per try, competing for the emulated CPU with the daemon's start).
    lab.sh(
        vm,
        f"NODEOS_CRASH_AT={shlex.quote(step)} setsid -f nodeosd --config /etc/nodeos/nodeosd.toml "
        f"> {CRASH_LOG} 2>&1 < /dev/null\n"
        f"log={CRASH_LOG}; t=0; until grep -q '; API on ' $log; do sleep 1; t=$((t+1)); "
        # Dead before ready (a crash point passed during start-up) or too slow: say which.
        "pgrep -x nodeosd >/dev/null || { echo 'nodeosd died before ready:'; cat $log; exit 1; }; "
        "[ $t -le 600 ] || { echo 'nodeosd not ready in 600 s:'; cat $log; ps -eo pid,etime,cmd; exit 1; }; "
        "done",
        timeout=660,
    )


def start_unit(lab: Lab, vm: str) -> None:
    """nodeosd under systemd again; returns at READY=1 (Type=notify: `systemctl start` waits)."""
    lab.sh(vm, "systemctl start nodeosd.service", timeout=900)


def wait_dead(lab: Lab, vm: str, timeout: float = 60) -> None:
    # By process name: `pgrep -f nodeosd` would match this very shell's command line.
    lab.sh(
        vm,
        f"t=0; while pgrep -x nodeosd >/dev/null; do t=$((t+1)); "
        f"[ $t -gt {int(timeout)} ] && exit 1; sleep 1; done",
        timeout=timeout + 30,
    )


STATE_SCRIPT = """
nodeos volume list --json
echo @@
nodeos status --json
echo @@
lvs --noheadings -o lv_name,segtype 2>/dev/null | awk '$2 == "thin" {print $1}'
echo @@
ls /sys/kernel/config/nvmet/subsystems 2>/dev/null | grep '^nqn.2014-08.io.nodeos:vol:' || true
"""


def node_state(lab: Lab, vm: str) -> tuple[list[dict[str, Any]], dict[str, Any], set[str], set[str]]:
    """(volume list, status, thin LVs, our nvmet subsystems) in one round trip to the VM."""
    r = lab.sh(vm, STATE_SCRIPT, timeout=300)
    vols, status, lvs, subs = r.stdout.split("@@\n")
    return json.loads(vols), json.loads(status), set(lvs.split()), set(subs.split())
