"""How long a snapshot of a replicated volume holds a host's writes on SPDK (issue 29; marker
`spdk`): the cluster of test_spdk_cluster.py (three real nodeosd, real nvmf_tgt on loopback, a
2-replica volume on n1 and n2, n3 the third vote).

- one point on every replica: a host writes run after run of new data over the whole volume
  (each run's bytes kept: the runs are the sequence numbers), the snapshot is taken mid-run; each
  replica's snapshot, read back from its own target, must be the same bytes, and be one prefix of
  the write stream (run k's first part over run k-1's rest, give or take the writes in flight);
- the hold, side by side: the one-step snapshot (nodeos/agent/onestep.py) and the phases of
  agent passes it replaces (asked for through the cluster's key-value store), alternated, each
  while a host writes 4 KiB at queue depth 1 with bdevperf. Host side: bdevperf's longest write
  (at queue depth 1 the longest gap between two completed writes, less a few microseconds); node
  side: the primary's freeze -> thaw, from its log.

Figures only: nothing here bounds the time (a loaded shared host stretches any RPC).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from typing import Any

import pytest

from . import test_spdk_cluster as cluster
from .test_spdk_cluster import H1, Node, Writer, _leg_bytes, _point, _wait_ready

nodes = cluster.nodes  # the cluster fixture: a cluster of this module's own
_none_left_behind = cluster._none_left_behind

pytestmark = [pytest.mark.spdk, pytest.mark.timeout(1800)]
TRIALS = int(os.environ.get("NODEOS_SNAPSHOT_TRIALS", "3"))
ATTEMPTS = 5  # snapshots taken until one lands inside a run of the writer
KNOB = "nodeos/snapshot-hold"
HELD_NEW = re.compile(
    r"snapshot (\S+): every leg taken in one step, writes of mirror \S+ held ([0-9.]+) ms \(([^)]*) ms\)"
    r"(?:; legs answered after the freeze: ([^;\n]*) ms)?"
)
HELD_OLD = re.compile(r"writes of mirror \S+ thawed after ([0-9.]+) s")


def _snap_legs(nodes: list[Node], name: str, size_mib: int) -> dict[int, bytes]:
    """Each storage node's leg of snapshot `name`, read back from its own target."""
    out = {}
    for n in nodes[:2]:
        v = n.ok("volume", "show", name)
        sid = v.get("snap_id") or v.get("vol_id")
        snaps = [x.vol_id for x in n.target.dp.list_volumes() if x.kind == "snapshot"]
        assert sid in snaps or len(snaps) == 1, (n.index, sid, snaps)
        out[n.index] = _leg_bytes(n, size_mib, sid if sid in snaps else snaps[0])
    return out


def _bdevperf(n: Node, nqn: str, seconds: int) -> subprocess.Popen[str]:
    cfg = n.root / "bdevperf.json"
    attach = {"name": "F", "trtype": "TCP", "adrfam": "IPv4", "traddr": n.addr, "trsvcid": "4420"}
    attach.update(subnqn=nqn, hostnqn=H1)
    cfg.write_text(
        json.dumps(
            {
                "subsystems": [
                    {
                        "subsystem": "bdev",
                        "config": [{"method": "bdev_nvme_attach_controller", "params": attach}],
                    }
                ]
            }
        )
    )
    cmd = [str(n.target.tool("bdevperf")), "--no-huge", "-s", "512", "--disable-cpumask-locks", "-m", "0x1"]
    cmd += ["-r", str(n.root / "bdevperf.sock"), "--json", str(cfg), "-q", "1", "-o", "4096"]
    cmd += ["-w", "randwrite", "-t", str(seconds), "-f"]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=lambda: os.nice(19)
    )


def _bdevperf_result(p: subprocess.Popen[str]) -> dict[str, float]:
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, out[-3000:]
    # "Total : IOPS MiB/s Fail/s TO/s Average min max" (latencies in microseconds)
    m = re.search(
        r"^\s*Total\s*:\s*([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)",
        out,
        re.M,
    )
    assert m is not None, out[-3000:]
    iops, _, fails, _, avg, _, mx = (float(x) for x in m.groups())
    return {"iops": iops, "fail_per_s": fails, "avg_ms": avg / 1000, "max_ms": mx / 1000}


def _log(n: Node) -> str:
    return (n.root / "nodeosd.log").read_text(errors="replace")


def _node_held(primary: Node, before: str, name: str, one_step: bool) -> tuple[float, str]:
    """The primary's freeze -> thaw of the snapshot taken since its log was `before`, in ms, and
    its parts (one step: "freeze F, legs L, thaw T")."""
    deadline = time.monotonic() + 60
    while True:
        new = _log(primary)[len(before) :]
        if one_step:
            held = [
                (float(ms), f"{parts}; legs answered: {legs}" if legs else parts)
                for s, ms, parts, legs in HELD_NEW.findall(new)
                if s == name
            ]
        else:
            held = [(float(s) * 1000, "") for s in HELD_OLD.findall(new)]
        if held:
            return held[-1]
        assert time.monotonic() < deadline, f"no hold of {name} in the log: {new[-3000:]}"
        time.sleep(0.2)


def _snapshot_under_bdevperf(
    nodes: list[Node], primary: Node, nqn: str, name: str, one_step: bool
) -> dict[str, Any]:
    n1 = nodes[0]
    if one_step:
        n1.ok("cluster", "kv", "put", KNOB, "one-step")
    else:
        n1.ok("cluster", "kv", "put", KNOB, "passes")
    before = _log(primary)
    perf = _bdevperf(primary, nqn, 8)
    time.sleep(4.0)  # past bdevperf's start and connect
    t0 = time.monotonic()
    snap = n1.ok("volume", "snapshot", "v5", name)
    took = time.monotonic() - t0
    res = _bdevperf_result(perf)
    assert snap["state"] == "ready", snap
    node_ms, parts = _node_held(primary, before, name, one_step)
    res.update(node_ms=node_ms, parts=parts, console_s=took)
    n1.ok("volume", "delete", name)
    return res


def test_a_one_step_snapshot_is_one_point_on_every_replica_and_holds_writes_for_milliseconds(
    nodes: list[Node],
) -> None:
    n1, n2 = nodes[:2]
    size_mib = int(os.environ.get("NODEOS_SNAPSHOT_MIB", "64"))
    n1.ok("volume", "create", "v5", "--size", f"{size_mib}MiB", "--replicas", "2", "--timeout", "90")
    v = _wait_ready(n1, "v5")
    primary = n1 if v["primary"] == "n1" else n2
    n1.ok("volume", "grant", "v5", "--host", H1)
    n1.ok("cluster", "kv", "put", KNOB, "one-step")

    # One point on every replica, taken until one lands inside a run of the writer (part of run k
    # over the rest of run k-1: writes flowed around it; between runs it would prove nothing).
    writer = Writer(primary, v["nqn"], size_mib)
    inside = 0
    for attempt in range(ATTEMPTS):
        deadline = time.monotonic() + 600  # a loaded shared host makes each run take long
        first = len(writer.started)
        while len(writer.started) < max(3, first + 1) or len(writer.times) < 2:
            assert writer.error is None and time.monotonic() < deadline, writer.error
            time.sleep(0.02)
        (a, b), start = writer.times[-1], writer.started[-1]
        time.sleep(max(0.0, start + 0.5 * (b - a) - time.monotonic()))
        before, name = _log(primary), f"s5{attempt}"
        t0 = time.monotonic()
        snap = n1.ok("volume", "snapshot", "v5", name)
        t1 = time.monotonic()
        assert snap["state"] == "ready", snap
        held, _ = _node_held(primary, before, name, True)
        legs = _snap_legs(nodes, name, size_mib)
        assert legs[1] == legs[2], "the replicas' snapshots differ: not one point of the write stream"
        run, mib = _point(legs[1], list(writer.runs))
        print(
            f"\none point: run {run}, {mib:.2f}/{size_mib} MiB of it; "
            f"console {t1 - t0:.2f} s, held {held:.1f} ms"
        )
        n1.ok("volume", "delete", name)
        inside += 0 < mib < size_mib
        if inside:
            break
    writer.finish()
    assert inside, f"no snapshot of {ATTEMPTS} landed inside a run of the writer"

    # The hold, one step against the phases of passes, alternated.
    rows = []
    for i in range(TRIALS):
        for one_step in (True, False):
            r = _snapshot_under_bdevperf(
                nodes, primary, v["nqn"], f"h{i}{'n' if one_step else 'o'}", one_step
            )
            rows.append(("one step" if one_step else "passes", r))
            parts = f" ({r['parts']} ms)" if r["parts"] else ""
            print(
                f"{rows[-1][0]:>8}: host longest write {r['max_ms']:.1f} ms (avg {r['avg_ms']:.2f} ms, "
                f"{r['iops']:.0f} IOPS, fail/s {r['fail_per_s']:.1f}), "
                f"node freeze->thaw {r['node_ms']:.1f} ms{parts}, console {r['console_s']:.2f} s"
            )
    n1.run("cluster", "kv", "delete", KNOB)
    for kind in ("one step", "passes"):
        rs = [r for k, r in rows if k == kind]
        print(
            f"{kind}: host longest write ms {[round(r['max_ms'], 1) for r in rs]}, "
            f"node freeze->thaw ms {[round(r['node_ms'], 1) for r in rs]}"
        )
    n1.ok("volume", "revoke", "v5", "--host", H1)
    n1.ok("volume", "delete", "v5")
