"""Read throughput of a published volume with 1, 2 and 3 replicas serving (issue 13).

    sudo .venv/bin/python bench/pubread_bench.py [--name LAB] [--size-mib 64] [--seconds 8] [--rounds 2]
                                                [--no-write]

Uses the lab LAB when it is up (3 storage VMs formed into a cluster, a GPU-node VM h1), else
boots one of that shape and takes it down at the end; also run from
tests/lab/test_pubread_bench.py (NODEOS_BENCH_PUBREAD=1) on the shared cluster3 lab. Not
pass/fail: figures.

A volume of random data (written from h1) is snapshotted and published to the three nodes (one
seed, two copies, each verified by its sha256). h1 then connects to 1, 2 or 3 of them (one
`nvme connect` per node's I/O listener: that many paths, every one ANA optimized), sets the
subsystem's I/O policy (round-robin; with 3 paths also queue-depth where the kernel has it) and
runs fio on the multipath device: 128 KiB sequential reads at QD 16 and 4 KiB random reads at
QD 32, O_DIRECT, `--seconds` each. Every configuration runs once per round, in the same order
(the single replica moves to the next node each round); each node's read sectors (its
read-only view's block stat) give the share it served. Reported: MB/s and IOPS (median of the
rounds) and their ratio to one replica, from the same run.
TCG emulates every guest instruction on a shared 2-core host, each VM one vCPU: lab figures,
not hardware.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
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

SECTION = "## Published volume: read throughput with 1, 2 and 3 replicas (lab, TCG)"
SRC, SNAP, PUB = "pubread-src", "pubread-snap", "pubread"
HOST = "h1"
# (paths, I/O policy): the configurations of one round.
CONFIGS = [(1, "round-robin"), (2, "round-robin"), (3, "round-robin"), (3, "queue-depth")]


def _nodeos(lab: Lab, vm: str, *args: str, timeout: float = 600) -> Any:
    r = lab.exec(vm, ["nodeos", *args, "--json"], timeout=timeout)
    if r.rc != 0:
        raise RuntimeError(f"nodeos {' '.join(args)} -> {r.rc}: {r.stdout} {r.stderr}")
    return json.loads(r.stdout) if r.stdout.strip() else None


def _subsys(nqn: str, body: str) -> str:
    """A shell loop running `body` in the host's subsystem directory ($s) of `nqn`."""
    return (
        "for s in /sys/class/nvme-subsystem/nvme-subsys*; do "
        f'[ "$(cat $s/subsysnqn 2>/dev/null)" = "{nqn}" ] || continue; {body}; done'
    )


def _live_paths(lab: Lab, nqn: str) -> tuple[int, str]:
    """Live controllers of `nqn` on the host and its multipath head device ('' if none yet)."""
    body = (
        "for c in $s/nvme[0-9]*; do [ -e $c/address ] && cat $c/state; done; "
        "ls -d $s/nvme*n1 2>/dev/null | head -1 | xargs -r basename | sed 's/^/head /'"
    )
    out = lab.exec(HOST, ["sh", "-c", _subsys(nqn, body)], timeout=120).stdout.split("\n")
    live = sum(1 for li in out if li.strip() == "live")
    head = next((li.split()[1] for li in out if li.startswith("head ")), "")
    return live, head


def _wait_paths(lab: Lab, nqn: str, n: int, timeout: float = 180) -> str:
    """Until the host has `n` live paths to `nqn`; its head device's name."""
    deadline = time.monotonic() + timeout
    while True:
        live, head = _live_paths(lab, nqn)
        if live == n and head:
            return head
        if time.monotonic() > deadline:
            raise RuntimeError(f"{HOST} sees {live} live paths to {nqn}, wanted {n}")
        time.sleep(1)


def connect(lab: Lab, nqn: str, listeners: list[dict[str, Any]], policy: str) -> tuple[str, str]:
    """One controller per listener; the head device and the I/O policy in force."""
    for li in listeners:
        lab.exec(
            HOST,
            ["nvme", "connect", "-t", "tcp", "-a", li["traddr"], "-s", str(li["trsvcid"]), "-n", nqn,
             "--keep-alive-tmo=5", "--ctrl-loss-tmo=30"],
            timeout=300,
            check=True,
        )  # fmt: skip
    head = _wait_paths(lab, nqn, len(listeners))
    got = lab.exec(
        HOST,
        ["sh", "-c", _subsys(nqn, f"echo {policy} > $s/iopolicy 2>/dev/null; cat $s/iopolicy")],
        timeout=60,
    ).stdout.strip()
    return f"/dev/{head}", got


def fio(lab: Lab, dev: str, rw: str, bs: str, qd: int, seconds: float) -> dict[str, float]:
    r = lab.exec(
        HOST,
        ["fio", "--name=r", f"--filename={dev}", "--readonly", "--direct=1", "--ioengine=libaio",
         f"--rw={rw}", f"--bs={bs}", f"--iodepth={qd}", "--time_based", f"--runtime={int(seconds)}",
         "--ramp_time=2", "--output-format=json"],
        timeout=seconds + 300,
        check=True,
    )  # fmt: skip
    job = json.loads(r.stdout[r.stdout.index("{") :])["jobs"][0]
    assert job["error"] == 0, job["error"]
    return {"mbps": job["read"]["bw_bytes"] / 1e6, "iops": job["read"]["iops"]}


def sectors_read(lab: Lab, vm: str, uuid: str) -> int:
    """Sectors read from `vm`'s read-only view of the published volume (what its target served)."""
    from nodeos.agent.published import view_id
    from nodeos.dataplane.mirror_names import VIEW_PREFIX

    script = f"cat /sys/block/$(basename $(readlink -f /dev/mapper/{VIEW_PREFIX}{view_id(uuid)}))/stat"
    return int(lab.exec(vm, ["sh", "-c", script], timeout=60, check=True).stdout.split()[2])


def tcp_listeners(lab: Lab, listeners: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per node: its TCP listener on the VM's own address (the hosts' network), else its first."""
    out: dict[str, dict[str, Any]] = {}
    for li in listeners:
        if li["trtype"] == "tcp" and (li["node"] not in out or li["traddr"] == lab.addr(li["node"])):
            out[li["node"]] = li
    return out


def prepare(lab: Lab, storage: tuple[str, ...], size_mib: int) -> dict[str, Any]:
    """Pools, a volume of random data written from the host, its snapshot published to every
    storage node and granted to the host: the published volume as `volume show` gives it."""
    s1, hostnqn = storage[0], lab.spec(HOST).hostnqn
    for vm in storage:
        _nodeos(lab, vm, "pool", "create", "p", "--drives", "all")
    _nodeos(lab, s1, "host", "add", hostnqn)
    vol = _nodeos(lab, s1, "volume", "create", SRC, "--size", f"{size_mib}MiB")
    _nodeos(lab, s1, "volume", "grant", SRC, "--host", hostnqn)
    lab.exec(
        HOST,
        ["nvme", "connect-all", "-t", "tcp", "-a", lab.addr(vol["primary"]), "-s", "8009"],
        timeout=300,
        check=True,
    )
    dev = f"/dev/{_wait_paths(lab, vol['nqn'], 1)}"
    lab.exec(
        HOST,
        ["dd", "if=/dev/urandom", f"of={dev}", "bs=1M", f"count={size_mib}", "oflag=direct", "status=none"],
        timeout=1800,
        check=True,
    )
    lab.exec(HOST, ["nvme", "disconnect", "-n", vol["nqn"]], timeout=300)
    _nodeos(lab, s1, "volume", "revoke", SRC, "--host", hostnqn)
    _nodeos(lab, s1, "volume", "snapshot", SRC, SNAP)
    t0 = time.monotonic()
    pub = _nodeos(lab, s1, "volume", "publish", SNAP, PUB, "--timeout", "1500", timeout=1600)
    pub["publish_s"] = round(time.monotonic() - t0, 1)
    _nodeos(lab, s1, "volume", "grant", PUB, "--host", hostnqn)
    return pub


def _gone(lab: Lab, vm: str, *show: str) -> bool:
    return lab.exec(vm, ["nodeos", *show, "--json"], timeout=300).rc != 0


def cleanup(lab: Lab, storage: tuple[str, ...]) -> None:
    """Leaves the lab as found (the shared-lab contract): nothing of the bench left."""
    s1, hostnqn = storage[0], lab.spec(HOST).hostnqn
    lab.exec(HOST, ["sh", "-c", "nvme disconnect-all >/dev/null 2>&1"], timeout=600)
    lab.exec(s1, ["nodeos", "volume", "unpublish", PUB, "--force", "--json"], timeout=900)
    deadline = time.monotonic() + 600
    while not _gone(lab, s1, "volume", "show", PUB) and time.monotonic() < deadline:
        time.sleep(5)  # every node removes its copy
    for args in (
        ("volume", "delete", SNAP, "--force"),
        ("volume", "revoke", SRC, "--host", hostnqn),
        ("volume", "delete", SRC, "--force"),
        ("host", "remove", hostnqn),
    ):
        lab.exec(s1, ["nodeos", *args, "--json"], timeout=900)
    pending = list(storage)
    while pending and time.monotonic() < deadline + 300:
        for vm in list(pending):
            lab.exec(vm, ["nodeos", "pool", "delete", "p", "--json"], timeout=600)
            pools = lab.exec(vm, ["nodeos", "pool", "list", "--json"], timeout=300).stdout
            if not any(x.get("name") == "p" and x.get("node") == vm for x in json.loads(pools or "[]")):
                pending.remove(vm)
        if pending:
            time.sleep(5)


def run(
    lab: Lab,
    storage: tuple[str, ...] = ("s1", "s2", "s3"),
    size_mib: int = 64,
    seconds: float = 8,
    rounds: int = 2,
    sink: Any = None,
) -> dict[str, Any]:
    """The whole bench on an up lab; `sink(res)` after each round (figures so far survive a
    bench cut short)."""
    res: dict[str, Any] = {"size_mib": size_mib, "seconds": seconds, "rounds": rounds, "runs": []}
    try:
        pub = prepare(lab, storage, size_mib)
        res["publish_s"] = pub["publish_s"]
        by_node = tcp_listeners(lab, pub["listeners"])
        if len(by_node) < len(storage):  # the view taken before every node reported its listeners
            by_node = tcp_listeners(lab, _nodeos(lab, storage[0], "volume", "show", PUB)["listeners"])
        nodes = [vm for vm in storage if vm in by_node]
        assert len(nodes) == 3, f"published to {sorted(by_node)}: the bench needs 3 serving nodes"
        for r in range(rounds):
            for k, policy in CONFIGS:
                serving = [nodes[(r + i) % len(nodes)] for i in range(k)]
                before = {vm: sectors_read(lab, vm, pub["uuid"]) for vm in nodes}
                dev, got = connect(lab, pub["nqn"], [by_node[vm] for vm in serving], policy)
                run_ = {"round": r + 1, "paths": k, "policy": got, "asked": policy, "nodes": serving}
                if got == policy:
                    run_["seq"] = fio(lab, dev, "read", "128k", 16, seconds)
                    run_["rand"] = fio(lab, dev, "randread", "4k", 32, seconds)
                    after = {vm: sectors_read(lab, vm, pub["uuid"]) for vm in nodes}
                    run_["sectors"] = {vm: after[vm] - before[vm] for vm in nodes}
                lab.exec(HOST, ["nvme", "disconnect", "-n", pub["nqn"]], timeout=300)
                res["runs"].append(run_)
                print(json.dumps(run_), flush=True)
            if sink:
                sink(res)
    finally:
        cleanup(lab, storage)
    return res


def summary(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Per configuration: median MB/s and IOPS over the rounds, ratios to 1 replica, the share
    of the sectors each serving node served."""
    rows: list[dict[str, Any]] = []
    for k, policy in CONFIGS:
        runs = [x for x in res["runs"] if x["paths"] == k and x["asked"] == policy and "seq" in x]
        if not runs:
            rows.append({"paths": k, "policy": policy, "runs": 0})
            continue
        sectors = [sum(x["sectors"][vm] for vm in x["nodes"]) or 1 for x in runs]
        shares = [
            sorted((x["sectors"][vm] / s for vm in x["nodes"]), reverse=True)
            for x, s in zip(runs, sectors, strict=True)
        ]
        rows.append(
            {
                "paths": k,
                "policy": policy,
                "runs": len(runs),
                "seq_mbps": statistics.median(x["seq"]["mbps"] for x in runs),
                "seq_all": [round(x["seq"]["mbps"], 1) for x in runs],
                "rand_iops": statistics.median(x["rand"]["iops"] for x in runs),
                "rand_all": [round(x["rand"]["iops"]) for x in runs],
                "shares": [round(statistics.median(s[i] for s in shares), 2) for i in range(k)],
            }
        )
    one = next((r for r in rows if r["paths"] == 1 and r["runs"]), None)
    for r in rows:
        if one and r["runs"]:
            r["seq_ratio"] = round(r["seq_mbps"] / one["seq_mbps"], 2)
            r["rand_ratio"] = round(r["rand_iops"] / one["rand_iops"], 2)
    return rows


def report(res: dict[str, Any], when: str) -> str:
    lines = [
        SECTION,
        "",
        f"`bench/pubread_bench.py`, {when}: a {res['size_mib']} MiB published volume of random data on "
        f"3 storage VMs (published in {res.get('publish_s')} s), read by one GPU-node VM through 1, 2 or 3 "
        f"of its paths; fio O_DIRECT, {res['seconds']:g} s per run, {res['rounds']} round(s), medians. "
        "TCG on a shared 2-core host, one vCPU per VM: lab figures, not hardware.",
        "",
        "| replicas serving (paths) | I/O policy | 128 KiB seq MB/s | ratio | 4 KiB rand IOPS (QD 32) "
        "| ratio | share of sectors per node |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary(res):
        if not r["runs"]:
            lines.append(f"| {r['paths']} | {r['policy']} | not run (policy not offered) | | | | |")
            continue
        lines.append(
            f"| {r['paths']} | {r['policy']} | {r['seq_mbps']:.1f} ({', '.join(map(str, r['seq_all']))}) "
            f"| {r.get('seq_ratio')} | {r['rand_iops']:.0f} ({', '.join(map(str, r['rand_all']))}) "
            f"| {r.get('rand_ratio')} | {' / '.join(f'{s:.2f}' for s in r['shares'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="pubread-bench", help="a lab that is up (else one is booted)")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    add_no_write(ap)
    a = ap.parse_args()
    with lab_for_run(
        a.name, storage=3, drives=1, hosts=1, drive_size_mib=512, cluster=True, labels=[]
    ) as lab:
        res = run(lab, size_mib=a.size_mib, seconds=a.seconds, rounds=a.rounds)
    print(json.dumps(res, indent=1))
    text = report(res, datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    publish(SECTION, text, write=not a.no_write)


if __name__ == "__main__":
    main()
