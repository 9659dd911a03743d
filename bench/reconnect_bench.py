"""Reconnect after a storage node's reboot (issue 28): many host NQNs hold a path to a volume on one
storage VM, the VM is powered off and on, and the hosts' controllers come back by themselves.

    sudo .venv/bin/python bench/reconnect_bench.py [--name LAB] [--hosts 100] [--no-write]

Uses the lab LAB when it is up, else boots its own (1 storage VM, 1 GPU node) and takes it down
at the end. The GPU-node VM stands in for N hosts: N host NQNs (`-q NQN -I ID`), each registered
and granted (one map change each for all), each connected with one I/O queue and the settings
docs/operations.md gives ("Host settings": keep-alive 5 s, reconnect every `--reconnect-delay`
s, `--ctrl-loss-tmo=-1`). Then the storage VM is powered off and on at once; every second the
GPU node counts its live controllers: when the node's ports took connections again, and how
long until 50 %, 90 % and all N were back, against the second the node's nodeosd linked its
held exports (its journal). Not pass/fail: figures. TCG emulates every guest instruction on a
shared 2-core host: lab figures, not hardware.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))
sys.path.insert(0, str(PROJECT / "bench"))

from benchdoc import add_no_write, publish  # noqa: E402
from benchlab import lab_for_run  # noqa: E402
from storm_bench import CONTROL, SOCK, nqns  # noqa: E402

from nodeos_devtools.lab import Lab  # noqa: E402

SECTION = "## Reconnect after a storage node's reboot: many host NQNs (lab, TCG)"
VOL = "reconnect"

# On the GPU node: connect every NQN (10 at once), then report how many are live.
CONNECT = r"""
import json, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
a = json.load(sys.stdin)
def one(n):
    cmd = ["nvme", "connect", "-t", "tcp", "-a", a["addr"], "-s", a["port"], "-n", a["sub"], "-q", n,
           "-I", n.rsplit(":", 1)[1], "--nr-io-queues=1", "--keep-alive-tmo=5", "--ctrl-loss-tmo=-1",
           "--reconnect-delay=" + str(a["delay"])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return r.returncode == 0 or "already connected" in r.stderr, (r.stdout + r.stderr)[-200:]
with ThreadPoolExecutor(10) as ex:
    res = list(ex.map(one, a["nqns"]))
print(json.dumps({"ok": sum(1 for r in res if r[0]), "fails": [r[1] for r in res if not r[0]][:3]}))
"""

# On the GPU node, in the background: every second, the wall clock and the controllers of the
# volume by state, until the stop file appears.
WATCH = r"""
import glob, os, sys, time
sub = sys.argv[1]
while not os.path.exists("/tmp/reconnect.stop"):
    states = {}
    for c in glob.glob("/sys/class/nvme/nvme*"):
        try:
            if open(c + "/subsysnqn").read().strip() != sub:
                continue
            s = open(c + "/state").read().strip()
        except OSError:
            continue
        states[s] = states.get(s, 0) + 1
    print(f"{time.time():.2f} " + " ".join(f"{k}={v}" for k, v in sorted(states.items())), flush=True)
    time.sleep(1)
"""


def _nodeos(lab: Lab, vm: str, *args: str, timeout: float = 600) -> Any:
    r = lab.exec(vm, ["nodeos", *args, "--json"], timeout=timeout)
    if r.rc != 0:
        raise RuntimeError(f"nodeos {' '.join(args)} -> {r.rc}: {r.stdout} {r.stderr}")
    return json.loads(r.stdout) if r.stdout.strip() else None


def _samples(text: str) -> list[tuple[float, int]]:
    """(wall clock, live controllers) per line of the watch's output."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        try:
            t = float(parts[0])
        except ValueError:
            continue
        live = sum(int(p.split("=")[1]) for p in parts[1:] if p.startswith("live="))
        out.append((t, live))
    return out


def _first(samples: list[tuple[float, int]], since: float, at_least: int, after: float) -> float | None:
    """Seconds from `since` to the first sample at or after `after` with `at_least` live."""
    for t, live in samples:
        if t >= max(since, after) and live >= at_least:
            return round(t - since, 1)
    return None


def _dropped(samples: list[tuple[float, int]], on: float, base: int) -> float:
    """When the hosts had seen the node go (the first sample after power-on with fewer than
    `base` live): a host notices a lost controller only at its keep-alive, so the samples just
    after power-on still count the old connections."""
    return next((t for t, live in samples if t >= on and live < base), on)


def _clock_offset(lab: Lab, vm: str) -> float:
    """This host's wall clock minus vm's (a guest's clock under TCG need not agree; the exec's own
    latency, about a second under load, bounds the error)."""
    t0 = time.time()
    guest = float(lab.exec(vm, ["date", "+%s.%N"], timeout=60).stdout)
    return (t0 + time.time()) / 2 - guest


def _linked_at(lab: Lab, vm: str) -> float | None:
    """The wall clock (vm's) at which the rebooted node's nodeosd linked its held exports."""
    r = lab.exec(
        vm, ["sh", "-c", "journalctl -b -u nodeosd -o short-unix --no-pager | grep -m1 'held exports linked'"]
    )
    m = re.match(r"\s*([0-9.]+)", r.stdout)
    return float(m.group(1)) if m else None


def run(lab: Lab, n_hosts: int = 100, delay: int = 2, node: str = "s1", host: str = "h1") -> dict[str, Any]:
    names = nqns(n_hosts)
    res: dict[str, Any] = {"hosts": n_hosts, "reconnect_delay_s": delay}
    _nodeos(lab, node, "pool", "create", "p", "--drives", "all")
    try:
        vol = _nodeos(lab, node, "volume", "create", VOL, "--size", "64MiB")
        _nodeos(lab, node, "host", "add", *names)
        _nodeos(lab, node, "volume", "grant", VOL, *[a for n in names for a in ("--host", n)], timeout=1200)
        target = {"addr": lab.addr(node), "port": "4420", "sub": vol["nqn"], "delay": delay, "nqns": names}
        t0 = time.monotonic()
        r = lab.exec(host, ["python3", "-c", CONNECT], input=json.dumps(target), timeout=3600)
        got = json.loads(r.stdout)
        res["connect"] = {"ok": got["ok"], "of": n_hosts, "wall_s": round(time.monotonic() - t0, 1)}
        if got["fails"]:
            res["connect"]["first_failures"] = got["fails"]
        lab.exec(host, ["sh", "-c", "rm -f /tmp/reconnect.stop; cat > /tmp/reconnect-watch.py"], input=WATCH)
        lab.exec(
            host,
            [
                "sh",
                "-c",
                f"setsid python3 /tmp/reconnect-watch.py {vol['nqn']} >/tmp/reconnect.txt 2>&1 </dev/null &",
            ],
            timeout=60,
            check=True,
        )
        time.sleep(5)
        skew = _clock_offset(lab, host)  # samples are in h1's clock: moved onto this host's
        off = time.time()
        lab.kill(node)
        lab.start(node, wait=False)
        on = time.time()
        deadline = time.monotonic() + 1800
        samples: list[tuple[float, int]] = []
        while time.monotonic() < deadline:
            time.sleep(10)
            text = lab.exec(host, ["cat", "/tmp/reconnect.txt"], timeout=60).stdout
            samples = [(t + skew, live) for t, live in _samples(text)]
            if samples and samples[-1][0] > on and samples[-1][1] >= got["ok"]:
                break
        lab.exec(host, ["touch", "/tmp/reconnect.stop"], timeout=60)
        lab.wait_ready(node)
        linked = _linked_at(lab, node)
        if linked is not None:
            linked += _clock_offset(lab, node)
        before = [live for t, live in samples if t < off]
        base = max(before) if before else got["ok"]
        res["live_before"] = base
        res["off_to_on_s"] = round(on - off, 1)
        res["exports_linked_after_s"] = round(linked - on, 1) if linked else None
        marks = {"first": 1, "half": (base + 1) // 2, "90pct": (9 * base + 9) // 10, "all": base}
        gone = _dropped(samples, on, base)
        res["dropped_after_s"] = round(gone - on, 1)
        res["after_power_on_s"] = {k: _first(samples, on, v, gone) for k, v in marks.items()}
        if linked:
            res["after_exports_linked_s"] = {k: _first(samples, linked, v, gone) for k, v in marks.items()}
        lows = [live for t, live in samples if t > on]
        res["live_at_end"] = lows[-1] if lows else None
        # The curve for the doc: every sample from 5 s before the exports were linked (the
        # return), every 10th before it.
        since = (linked or on) - 5
        after_on = [s for s in samples if s[0] >= on]
        res["curve"] = [
            (round(t - on, 1), live) for i, (t, live) in enumerate(after_on) if t >= since or i % 10 == 0
        ]
    finally:
        lab.exec(
            host,
            ["sh", "-c", "touch /tmp/reconnect.stop; nvme disconnect-all >/dev/null 2>&1; true"],
            timeout=900,
        )
        try:
            lab.wait_ready(node)
            # Revoke all in one call and remove the hosts 8 at once, in one process (storm_bench's).
            payload = json.dumps({"sock": SOCK, "vol": VOL, "nqns": names, "verb": "remove"})
            lab.exec(node, ["python3", "-c", CONTROL], input=payload, timeout=3600)
            lab.exec(node, ["nodeos", "volume", "delete", VOL, "--force", "--json"], timeout=600)
            lab.exec(node, ["nodeos", "pool", "delete", "p", "--json"], timeout=600)
        except Exception as e:  # the figures are what this run is for; say what was left
            print(f"clean-up on {node} incomplete: {e!r}")
    return res


def report(res: dict[str, Any], when: str) -> str:
    a, b = res.get("after_power_on_s") or {}, res.get("after_exports_linked_s") or {}
    c = res.get("connect") or {}
    return "\n".join(
        [
            SECTION,
            "",
            f"`bench/reconnect_bench.py`, {when}: {res['hosts']} host NQNs on one GPU-node VM, each with one "
            f"path (1 I/O queue, keep-alive 5 s, reconnect every {res['reconnect_delay_s']} s, "
            "`--ctrl-loss-tmo=-1`) to a volume on one storage VM, which is powered off and on at once. "
            "TCG on a shared 2-core host: lab figures, not hardware.",
            "",
            f"Connected first: {c.get('ok')}/{c.get('of')} in {c.get('wall_s')} s (10 at once). The node's "
            f"nodeosd linked its held exports {res.get('exports_linked_after_s')} s after power-on; the "
            f"hosts had seen the node go {res.get('dropped_after_s')} s after power-on (keep-alive).",
            "",
            "| live again | s after power-on | s after the exports were linked |",
            "| --- | --- | --- |",
            *(f"| {k} | {a.get(k)} | {b.get(k)} |" for k in ("first", "half", "90pct", "all")),
            "",
            f"Live at the end: {res.get('live_at_end')} of {res.get('live_before')}. "
            f"Curve (s after power-on, live): {res.get('curve')}",
            "",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="reconnect-bench", help="a lab that is up (else one is booted)")
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--reconnect-delay", type=int, default=2)
    ap.add_argument("--node", default="s1", help="the storage VM powered off and on")
    add_no_write(ap)
    a = ap.parse_args()
    with lab_for_run(a.name, storage=1, drives=1, hosts=1, drive_size_mib=512) as lab:
        res = run(lab, a.hosts, a.reconnect_delay, a.node)
    print(json.dumps(res, indent=1))
    publish(SECTION, report(res, datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")), write=not a.no_write)


if __name__ == "__main__":
    main()
