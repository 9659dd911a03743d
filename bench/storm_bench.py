"""Startup storm (issue 13): many host NQNs registered, granted, discovering and connecting at once.

    sudo .venv/bin/python bench/storm_bench.py [--name LAB] [--hosts 200] [--no-write]

Uses the lab LAB when it is up, else boots its own (1 storage VM, 2 GPU nodes) and takes it
down at the end; also run from tests/lab/test_storm_bench.py (NODEOS_BENCH_STORM=1) on the
shared cluster3 lab right after the published-volume test. Not pass/fail: figures.

1. Control plane, on s1, one process calling the API (no console start-up per call): N host
   NQNs registered (`host.add`) and granted on one volume (`volume.grant`): a quarter one call
   at a time, a quarter from 8 threads at once (each call one Raft commit: do they overlap or
   queue?), the other half in one call (`nqns` / `hosts`: one map change): hosts/s and latency.
2. Hosts: every GPU-node VM runs `nvme discover` with its share of the NQNs (`-q NQN -I ID`),
   first 20 one at a time, then the rest 10 at once; then `nvme connect` (one I/O queue) in the
   same way, disconnecting after each wave of 50: discoveries/s, connects/s, failures.
3. Meanwhile s1 times `volume.show` every 0.5 s (the daemon's control-plane latency under the
   storm): p50 / p95 / max per phase.
TCG emulates every guest instruction on a shared 2-core host: lab figures, not hardware.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))  # nodeos_devtools, without the dev install too
sys.path.insert(0, str(PROJECT / "bench"))

from benchdoc import add_no_write, publish  # noqa: E402  (bench/ is on sys.path when a bench script runs)
from benchlab import lab_for_run  # noqa: E402

from nodeos_devtools.lab import Lab  # noqa: E402

SECTION = "## Startup storm: many host NQNs (lab, TCG)"
VOL = "storm"
SOCK = "/run/nodeos/api.sock"

# Runs inside s1 (the appliance's python3 and nodeos package): registers and grants the NQNs
# read from stdin; prints JSON of per-call latencies.
CONTROL = r"""
import json, sys, time, threading
from nodeos.rpc.client import Client
a = json.load(sys.stdin)
out = {}
def one(c, method, params):
    t = time.monotonic()
    try:
        c.call(method, params)
        return time.monotonic() - t, None
    except Exception as e:
        return time.monotonic() - t, f"{method}: {e}"[:300]
def phase(name, method, mk, nqns, threads):
    lat, errs = [], []
    lock = threading.Lock()
    todo = list(nqns)
    def worker():
        c = Client(a["sock"], timeout_s=300)
        while True:
            with lock:
                if not todo:
                    return
                n = todo.pop(0)
            d, e = one(c, method, mk(n))
            with lock:
                lat.append(d)
                if e:
                    errs.append(e)
    t0 = time.monotonic()
    ws = [threading.Thread(target=worker) for _ in range(threads)]
    for w in ws: w.start()
    for w in ws: w.join()
    out[name] = {"n": len(nqns), "threads": threads, "wall": time.monotonic() - t0, "lat": lat,
                 "errors": errs[:5], "failed": len(errs)}
def bulk(name, method, params, n):  # one call for n hosts: one map change
    c = Client(a["sock"], timeout_s=600)
    d, e = one(c, method, params)
    out[name] = {"n": n, "threads": 1, "wall": d, "lat": [d], "errors": [e] if e else [],
                 "failed": 1 if e else 0, "bulk": True}
q = len(a["nqns"]) // 4
seq, par, many = a["nqns"][:q], a["nqns"][q:2 * q], a["nqns"][2 * q:]
verb = a["verb"]
mk_h = lambda n: {"nqn": n, "dhchap_secret": None}
if verb == "add":
    mk_g = lambda n: {"name": a["vol"], "host": n}
    phase("host_add_1", "host.add", mk_h, seq, 1)
    phase("host_add_8", "host.add", mk_h, par, 8)
    bulk("host_add_bulk", "host.add", {"nqns": many}, len(many))
    phase("grant_1", "volume.grant", mk_g, seq, 1)
    phase("grant_8", "volume.grant", mk_g, par, 8)
    bulk("grant_bulk", "volume.grant", {"name": a["vol"], "hosts": many}, len(many))
elif verb == "hosts":  # the control plane alone (a loopback cluster without storage)
    phase("host_add_1", "host.add", mk_h, seq, 1)
    phase("host_add_8", "host.add", mk_h, par, 8)
    bulk("host_add_bulk", "host.add", {"nqns": many}, len(many))
    phase("host_remove_8", "host.remove", lambda n: {"nqn": n}, a["nqns"], 8)
else:
    bulk("revoke_bulk", "volume.revoke", {"name": a["vol"], "hosts": a["nqns"]}, len(a["nqns"]))
    phase("host_remove_8", "host.remove", lambda n: {"nqn": n}, a["nqns"], 8)
print(json.dumps(out))
"""

# Runs inside s1 in the background while a phase runs: `volume.show` every 0.5 s, latency per line.
PROBE = r"""
import os, sys, time
from nodeos.rpc.client import Client
c = Client(sys.argv[1], timeout_s=120)
while not os.path.exists("/tmp/storm-probe.stop"):
    t = time.monotonic()
    try:
        c.call("volume.show", {"name": sys.argv[2]})
        print(f"{time.monotonic() - t:.4f}", flush=True)
    except Exception as e:
        print(f"err {e}"[:200], flush=True)
    time.sleep(0.5)
"""

# Runs inside a GPU-node VM: discover or connect with each NQN read from stdin, `par` at once.
HOST = r"""
import json, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
a = json.load(sys.stdin)
def run(n):
    hid = n.rsplit(":", 1)[1]
    if a["mode"] == "discover":
        cmd = ["nvme", "discover", "-t", "tcp", "-a", a["addr"], "-s", "8009", "-q", n, "-I", hid]
    else:
        cmd = ["nvme", "connect", "-t", "tcp", "-a", a["addr"], "-s", a["port"], "-n", a["sub"], "-q", n,
               "-I", hid, "--nr-io-queues=1", "--ctrl-loss-tmo=5"]
    t = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return time.monotonic() - t, False, "timed out after 120 s"
    ok = r.returncode == 0 and (a["mode"] != "discover" or a["sub"] in r.stdout)
    return time.monotonic() - t, ok, (r.stdout + r.stderr)[-200:]
t0 = time.monotonic()
with ThreadPoolExecutor(a["par"]) as ex:
    res = list(ex.map(run, a["nqns"]))
print(json.dumps({"wall": time.monotonic() - t0, "ok": sum(1 for r in res if r[1]),
                  "lat": [r[0] for r in res], "fails": [r[2] for r in res if not r[1]][:3]}))
"""


def _pcts(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    return {
        "n": len(s),
        "p50_ms": round(1000 * statistics.median(s), 1),
        "p95_ms": round(1000 * s[min(len(s) - 1, int(0.95 * len(s)))], 1),
        "max_ms": round(1000 * s[-1], 1),
    }


def nqns(n: int) -> list[str]:
    """N host NQNs of the uuid form, the same on every run."""
    return [
        f"nqn.2014-08.org.nvmexpress:uuid:{uuid.uuid5(uuid.NAMESPACE_DNS, f'storm-{i}.nodeos')}"
        for i in range(n)
    ]


class Probe:
    """`volume.show` timed every 0.5 s on `vm` while a phase runs."""

    def __init__(self, lab: Lab, vm: str) -> None:
        self.lab, self.vm = lab, vm

    def __enter__(self) -> Probe:
        self.lab.exec(self.vm, ["sh", "-c", "rm -f /tmp/storm-probe.stop /tmp/storm-probe.txt"], timeout=60)
        self.lab.exec(self.vm, ["sh", "-c", "cat > /tmp/storm-probe.py"], input=PROBE, timeout=60, check=True)
        self.lab.exec(
            self.vm,
            [
                "sh",
                "-c",
                f"setsid python3 /tmp/storm-probe.py {SOCK} {VOL} > /tmp/storm-probe.txt 2>&1 < /dev/null &",
            ],
            timeout=60,
            check=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.lab.exec(self.vm, ["touch", "/tmp/storm-probe.stop"], timeout=60)
        time.sleep(1.5)
        self.result = self.lab.exec(self.vm, ["cat", "/tmp/storm-probe.txt"], timeout=60).stdout

    def figures(self) -> dict[str, Any]:
        lat = [float(x) for x in self.result.split() if x.replace(".", "", 1).isdigit()]
        errs = [li for li in self.result.splitlines() if li.startswith("err")]
        return {**_pcts(lat), "errors": len(errs), "first_error": errs[0] if errs else None}


def _nodeos(lab: Lab, vm: str, *args: str, timeout: float = 600) -> Any:
    r = lab.exec(vm, ["nodeos", *args, "--json"], timeout=timeout)
    if r.rc != 0:
        raise RuntimeError(f"nodeos {' '.join(args)} -> {r.rc}: {r.stdout} {r.stderr}")
    return json.loads(r.stdout) if r.stdout.strip() else None


def _host_wave(
    lab: Lab, vm: str, mode: str, hosts: list[str], par: int, target: dict[str, str]
) -> dict[str, Any]:
    """One wave of discover/connect from `vm` with `hosts`, `par` at once: wall time, failures."""
    args = {"mode": mode, "par": par, "nqns": hosts, "addr": target["addr"], "port": target["port"]}
    r = lab.exec(vm, ["python3", "-c", HOST], input=json.dumps({**args, "sub": target["nqn"]}), timeout=1800)
    try:
        got = json.loads(r.stdout)
    except ValueError:
        return {"vm": vm, "mode": mode, "n": len(hosts), "par": par, "wall_s": 0.0, "ok": 0,
                "first_failures": [(r.stdout + r.stderr)[-300:]]}  # fmt: skip
    out = {
        "vm": vm,
        "mode": mode,
        "n": len(hosts),
        "par": par,
        "wall_s": round(got["wall"], 2),
        "ok": got["ok"],
    }
    out.update({k: v for k, v in _pcts(got["lat"]).items() if k != "n"})
    if got["fails"]:
        out["first_failures"] = got["fails"]
    return out


def _disconnect(lab: Lab, vm: str, sub: str) -> dict[str, Any]:
    script = (
        f"n=$(grep -l '{sub}' /sys/class/nvme/nvme*/subsysnqn 2>/dev/null | wc -l); t0=$(date +%s%N); "
        f"nvme disconnect -n {sub} >/dev/null 2>&1; t1=$(date +%s%N); echo $n $(( (t1 - t0) / 1000000 ))"
    )
    r = lab.exec(vm, ["bash", "-c", script], timeout=900)
    try:
        n, took = r.stdout.split()
        return {"vm": vm, "controllers": int(n), "disconnect_ms": int(took)}
    except ValueError:
        return {"vm": vm, "error": (r.stdout + r.stderr)[-300:]}


def run(
    lab: Lab,
    n_hosts: int = 200,
    storage: tuple[str, ...] = ("s1",),
    hosts: tuple[str, ...] = ("h1",),
    sink: Any = None,
) -> dict[str, Any]:
    """The whole bench on an up lab (leaves it as found: volume, hosts and pools removed);
    `sink(res)` after each phase (figures so far survive a bench cut short)."""
    s1 = storage[0]
    names = nqns(n_hosts)
    res: dict[str, Any] = {"hosts": n_hosts, "storage_vms": len(storage), "gpu_vms": len(hosts)}
    for vm in storage:
        _nodeos(lab, vm, "pool", "create", "p", "--drives", "all")
    try:
        vol = _nodeos(lab, s1, "volume", "create", VOL, "--size", "64MiB")
        tcp = [li for li in vol.get("listeners") or [] if li.get("trtype") == "tcp"]
        port = str(tcp[0]["trsvcid"]) if tcp else "4420"
        target = {"addr": lab.addr(vol["primary"]), "port": port, "nqn": vol["nqn"]}
        res["target"] = target
        payload = json.dumps({"sock": SOCK, "vol": VOL, "nqns": names, "verb": "add"})
        with Probe(lab, s1) as p:
            r = lab.exec(s1, ["python3", "-c", CONTROL], input=payload, timeout=3600, check=True)
        ctl = json.loads(r.stdout)
        res["control"] = {
            k: {
                "n": v["n"],
                "threads": v["threads"],
                "per_s": round(v["n"] / v["wall"], 2) if v["wall"] else None,
                **{k: x for k, x in _pcts(v["lat"]).items() if k != "n"},
                "failed": v["failed"],
                "errors": v["errors"],
            }
            for k, v in ctl.items()
        }
        res["probe_during_grants"] = p.figures()
        if sink:
            sink(res)
        with Probe(lab, s1) as p:
            time.sleep(10)
        res["probe_idle"] = p.figures()
        share = {h: names[i :: len(hosts)] for i, h in enumerate(hosts)}
        for mode in ("discover", "connect"):
            waves: list[dict[str, Any]] = []
            with Probe(lab, s1) as p:
                for h, mine in share.items():
                    waves.append(_host_wave(lab, h, mode, mine[:20], 1, target))
                    if mode == "connect":
                        waves[-1]["disconnect"] = _disconnect(lab, h, target["nqn"])
                    rest = mine[20:]
                    for i in range(0, len(rest), 50):
                        waves.append(_host_wave(lab, h, mode, rest[i : i + 50], 10, target))
                        if mode == "connect":
                            waves[-1]["disconnect"] = _disconnect(lab, h, target["nqn"])
            res[mode] = waves
            res[f"probe_during_{mode}"] = p.figures()
            if sink:
                sink(res)
        payload = json.dumps({"sock": SOCK, "vol": VOL, "nqns": names, "verb": "remove"})
        r = lab.exec(s1, ["python3", "-c", CONTROL], input=payload, timeout=3600)
        if r.rc == 0:
            ctl = json.loads(r.stdout)
            res["control"].update(
                {
                    k: {
                        "n": v["n"],
                        "threads": v["threads"],
                        "per_s": round(v["n"] / v["wall"], 2),
                        **{k: x for k, x in _pcts(v["lat"]).items() if k != "n"},
                    }
                    for k, v in ctl.items()
                }
            )
    finally:
        for h in hosts:
            lab.exec(h, ["sh", "-c", "nvme disconnect-all >/dev/null 2>&1; rm -rf /tmp/storm-*"], timeout=600)
        lab.exec(s1, ["nodeos", "volume", "delete", VOL, "--force", "--json"], timeout=600)
        for vm in storage:
            lab.exec(vm, ["nodeos", "pool", "delete", "p", "--json"], timeout=600)
    return res


def rates(res: dict[str, Any], mode: str) -> dict[str, Any]:
    """Per-second rates of one mode's waves: one at a time against 10 at once."""
    waves = res.get(mode) or []
    out: dict[str, Any] = {}
    for par in (1, 10):
        ws = [w for w in waves if w["par"] == par]
        n, wall = sum(w["ok"] for w in ws), sum(w["wall_s"] for w in ws)
        out[par] = {"ok": n, "of": sum(w["n"] for w in ws), "per_s": round(n / wall, 2) if wall else None}
    return out


def report(res: dict[str, Any], when: str) -> str:
    c = res.get("control", {})
    lines = [
        SECTION,
        "",
        f"`bench/storm_bench.py`, {when}: {res['hosts']} host NQNs, {res['storage_vms']} storage VM(s), "
        f"{res['gpu_vms']} GPU-node VM(s), TCG on a shared 2-core host (lab figures, not hardware).",
        "",
        "| API calls on s1 (one process; `_bulk`: one call for all) | hosts | threads | hosts/s "
        "| p50 ms | p95 ms | max ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k, v in c.items():
        lines.append(
            f"| {k} | {v['n']} | {v['threads']} | {v.get('per_s')} | {v.get('p50_ms')} | {v.get('p95_ms')} | "
            f"{v.get('max_ms')} |"
        )
    lines += [
        "",
        "| host side | one at a time: ok/of, per s | 10 at once: ok/of, per s |",
        "| --- | --- | --- |",
    ]
    for mode in ("discover", "connect"):
        r = rates(res, mode)
        lines.append(
            f"| nvme {mode} | {r[1]['ok']}/{r[1]['of']}, {r[1]['per_s']} | "
            f"{r[10]['ok']}/{r[10]['of']}, {r[10]['per_s']} |"
        )
    lines += [
        "",
        "| `volume.show` latency on s1 | samples | p50 ms | p95 ms | max ms | errors |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for k in ("probe_idle", "probe_during_grants", "probe_during_discover", "probe_during_connect"):
        v = res.get(k) or {}
        lines.append(
            f"| {k.removeprefix('probe_').replace('_', ' ')} | {v.get('n')} | {v.get('p50_ms')} | "
            f"{v.get('p95_ms')} | {v.get('max_ms')} | {v.get('errors')} |"
        )
    fails = [w for m in ("discover", "connect") for w in res.get(m) or [] if w.get("first_failures")]
    if fails:
        lines += ["", "First failures: " + "; ".join(str(w["first_failures"][0])[:200] for w in fails[:3])]
    return "\n".join(lines) + "\n"


def local(n_hosts: int, size: int = 3) -> dict[str, Any]:
    """The control-plane half alone on a loopback cluster of `size` real nodeosd (witnesses, no
    storage): host.add / host.remove, one at a time and 8 at once, through the leader."""
    import subprocess
    import tempfile

    from nodeos.cluster.localcluster import LocalCluster

    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="storm-bench-")), size)
    try:
        cluster.form()
        leader = cluster.leader()
        payload = json.dumps({"sock": leader.socket, "vol": VOL, "nqns": nqns(n_hosts), "verb": "hosts"})
        env = {"PYTHONPATH": str(PROJECT), "PATH": "/usr/bin:/bin"}
        r = subprocess.run(
            [sys.executable, "-c", CONTROL],
            input=payload,
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
    finally:
        cluster.stop()
    return {
        k: {
            "n": v["n"],
            "threads": v["threads"],
            "per_s": round(v["n"] / v["wall"], 1),
            **{k: x for k, x in _pcts(v["lat"]).items() if k != "n"},
            "failed": v["failed"],
        }
        for k, v in json.loads(r.stdout).items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="storm-bench", help="a lab that is up (else one is booted)")
    ap.add_argument("--hosts", type=int, default=200)
    add_no_write(ap)
    ap.add_argument("--local", action="store_true", help="control plane only, on a loopback 3-node cluster")
    a = ap.parse_args()
    if a.local:
        print(json.dumps(local(a.hosts), indent=1))
        return
    with lab_for_run(a.name, storage=1, drives=1, hosts=2, drive_size_mib=512) as lab:
        st = lab.status()
        storage = tuple(v["name"] for v in st["vms"] if v["name"].startswith("s"))
        hosts = tuple(v["name"] for v in st["vms"] if v["name"].startswith("h"))
        res = run(lab, a.hosts, storage, hosts)
    print(json.dumps(res, indent=1))
    text = report(res, datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    publish(SECTION, text, write=not a.no_write)


if __name__ == "__main__":
    main()
