"""Failover of replicated volumes as a GPU node lives it (three storage VMs, kernel data plane):
fio random writes with verify run through the host's multipath device while a storage VM is
powered off. The primary's VM: I/O resumes on the other replica with zero verify errors and
the cluster moves the primary (new epoch); when the VM returns it rejoins as a secondary, is
copied in full from the new primary (its own leg may be one write ahead) and the volume is
healthy again with the same bytes on both replicas. A secondary's VM: the volume runs degraded
without an I/O error and resyncs when the VM returns; kept off past the re-placement grace (set
short for the last test), its replica is re-placed on the third VM and copied in full under
I/O, and deleted from the VM when it returns. A drain moves the primary, then the replica.

The longest I/O gap (fio's maximum completion latency) and, for the old primary's full copy,
rebuild MB/s against a raw copy of the same size over the same path are printed, appended to
artifacts/lab/figures.txt and recorded in docs/benchmarks.md, never asserted: TCG timings are
context, not hardware figures.

CI runs the primary's power-off (about 10 min with the shared boot); the secondary's power-off,
the drain, the re-placement past the grace and the network cut run with NODEOS_LAB_FULL=1
(docs/testing.md, "The lab tier and CI's budget")."""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos.dataplane.mirror_names import mirror_id_for, replica_nqn
from nodeos.errors import OperationFailed
from nodeos_devtools.lab import Lab, fio
from tests.lab.node_helpers import nodeos, ok, wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

pytestmark = pytest.mark.lab
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")
SIZE_MIB = 64
DATA_OFFSET_MIB = 8  # nodeos.dataplane.mirror_names.MIRROR_DATA_OFFSET
# The host's side of a fast failover (docs/operations.md, "Failover: host settings").
CONNECT_OPTS = "--keep-alive-tmo=5 --ctrl-loss-tmo=60 --reconnect-delay=2"
FIO_RUNTIME_S = 100  # failover in ~20-40 s under TCG; fio waits for a blocked I/O anyway
# The figures of every run, appended (pytest keeps a passing test's prints to itself).
FIGURES = Path(os.environ.get("NODEOS_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts"))
FIGURES = FIGURES / "lab" / "figures.txt"


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> Iterator[dict[str, Any]]:
    for vm in STORAGE:
        wait_daemon(lab, vm)
    for vm in STORAGE:
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    host = lab.spec("h1").hostnqn
    ok(lab, "s1", "host", "add", host)
    made: list[str] = []
    try:
        yield {"host": host, "made": made}
    finally:
        for vm in STORAGE:  # a test that failed half-way may have left a VM off
            _ensure_running(lab, vm)
        lab.exec("h1", ["nvme", "disconnect-all"], timeout=120)
        for name in made:
            nodeos(lab, "s1", "volume", "revoke", name, "--host", host)
            nodeos(lab, "s1", "volume", "delete", name, "--force")
        nodeos(lab, "s1", "host", "remove", host)
        for vm in STORAGE:
            nodeos(lab, vm, "pool", "delete", "p")


def _ensure_running(lab: Lab, vm: str) -> None:
    try:
        lab.exec(vm, ["true"], timeout=60)
    except OperationFailed:  # "not running (start it first)"
        lab.start(vm)
    wait_daemon(lab, vm)


def _events(lab: Lab, vm: str) -> list[dict[str, Any]]:
    return list(ok(lab, vm, "events")["events"])


def _show(lab: Lab, vm: str, name: str) -> dict[str, Any]:
    return ok(lab, vm, "volume", "show", name)


class Unanswered:
    """When the console said "no leader" (not_leader: nothing done, retry) while a failover ran:
    a leader election is part of a node's loss, the console's retry is the operator's."""

    def __init__(self) -> None:
        self.first = self.last = 0.0
        self.count = 0

    def show(self, lab: Lab, vm: str, name: str) -> dict[str, Any] | None:
        rc, out = nodeos(lab, vm, "volume", "show", name)
        if rc == 0:
            return dict(out)
        err = out.get("error", {}) if isinstance(out, dict) else {}
        assert err.get("code") == "not_leader", f"nodeos volume show {name} -> {rc}: {out}"
        self.last, self.count = time.monotonic(), self.count + 1
        self.first = self.first or self.last
        return None

    def note(self, since: float) -> str:
        if not self.count:
            return "console answered throughout"
        return (
            f"console answered not_leader {self.count}x, {self.first - since:.0f}-{self.last - since:.0f} s "
            "after the loss"
        )


def _wait(what: str, probe: Any, timeout: float = 600, every: float = 3) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def _head(lab: Lab, nqn: str) -> str:
    script = f"""
for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  if [ "$(cat $s/subsysnqn)" = "{nqn}" ]; then ls -d $s/nvme*n1 2>/dev/null | head -1 | xargs -r basename; fi
done"""
    return lab.sh("h1", script).stdout.strip()


def _connect(lab: Lab, vol: dict[str, Any], nodes: list[str]) -> str:
    """Connect h1 to every replica node; returns the multipath device."""
    lab.sh("h1", f"nvme connect-all -t tcp -a {lab.addr(nodes[0])} -s 8009 {CONNECT_OPTS}", timeout=300)
    head = _wait("the multipath device", lambda: _head(lab, vol["nqn"]), timeout=180)
    return f"/dev/{head}"


def _start_fio(lab: Lab, dev: str, tag: str) -> None:
    """Random writes with crc32c verify, for FIO_RUNTIME_S, in the background on h1."""
    fio = (
        f"fio --name={tag} --filename={dev} --rw=randwrite --bs=4k --size={SIZE_MIB // 2}M --direct=1 "
        f"--ioengine=libaio --thread --iodepth=4 --time_based --runtime={FIO_RUNTIME_S} --verify=crc32c "
        "--do_verify=1 --verify_fatal=1 --verify_backlog=64 --output-format=json "
        f"--output=/root/{tag}.json --write_bw_log=/root/{tag} --log_avg_msec=1000"
    )
    lab.sh(
        "h1",
        f"rm -f /root/{tag}.json /root/{tag}_bw*.log; date +%s.%N > /root/{tag}.t0; "
        f"setsid -f {fio} </dev/null >/dev/null 2>&1",
        timeout=60,
    )
    lab.sh("h1", "for i in $(seq 60); do pgrep -x fio && break; sleep 1; done; pgrep -x fio", timeout=90)


RETRIED = ("not_leader", "unknown_outcome", "already_exists")


def _ok_retrying(lab: Lab, *args: str, tries: int = 4) -> None:
    """A setup command on s1, run again as an operator would while a starved TCG cluster answers
    that it did nothing or may have done it (a create already done answers already_exists)."""
    for i in range(tries):
        rc, out = nodeos(lab, "s1", *args)
        if rc == 0:
            return
        code = (out.get("error") or {}).get("code") if isinstance(out, dict) else None
        if i > 0 and code == "already_exists":
            return
        assert code in RETRIED and i < tries - 1, f"nodeos {' '.join(args)} -> {rc}: {out}"
        time.sleep(5)


def _volume_under_fio(
    lab: Lab, cluster: dict[str, Any], name: str, replicas: int = 2
) -> tuple[dict[str, Any], list[str], str]:
    """A replicated volume granted to h1, connected on every path, fio writing through it for a
    while already: (the volume as created, its nodes in placement order, the host's device)."""
    cluster["made"].append(name)
    _ok_retrying(lab, "volume", "create", name, "--size", f"{SIZE_MIB}MiB", "--replicas", str(replicas))
    vol = _wait("the volume ready", lambda: (v := _show(lab, "s1", name))["state"] == "ready" and v, 300)
    nodes = [r["node"] for r in vol["replicas"]]
    _ok_retrying(lab, "volume", "grant", name, "--host", cluster["host"])
    dev = _connect(lab, vol, nodes)
    _start_fio(lab, dev, name)
    time.sleep(15)  # writes flowing through the primary's mirror to every leg
    return vol, nodes, dev


def _h1_clock(lab: Lab) -> float:
    """h1's wall clock minus this process's monotonic clock (to place test events on fio's log)."""
    before = time.monotonic()
    h1_now = float(lab.sh("h1", "date +%s.%N").stdout)
    return h1_now - (before + time.monotonic()) / 2


def _stalls(lab: Lab, tag: str, events: dict[str, float], offset: float) -> str:
    """Where the I/O stood still: every gap of 5 s or more between seconds in which fio completed
    writes (its 1 s bandwidth log), placed against the test's events (monotonic times)."""
    try:
        first, *rows = lab.sh("h1", f"cat /root/{tag}.t0 /root/{tag}_bw.1.log").stdout.splitlines()
        t0 = float(first)
        busy = sorted(
            int(f[0]) / 1000
            for f in (r.replace(" ", "").split(",") for r in rows)
            if f[2] == "1" and int(f[1]) > 0
        )
    except Exception as exc:  # the figure is context; the test checks the data
        return f"stalls not measured: {exc!r}"
    marks = sorted((v + offset - t0, k) for k, v in events.items())  # seconds since fio started

    def at(t: float) -> str:
        # t is the end of the last busy 1 s window, counted from fio's own start, which comes a
        # second or two after the recorded start under TCG: an event that close counts as before it.
        before = [(m, k) for m, k in marks if m <= t + 3.0]
        return f"{before[-1][1]} {t - before[-1][0]:+.0f} s" if before else f"{t:.0f} s into fio"

    gaps = [(a, b) for a, b in itertools.pairwise(busy) if b - a >= 5]
    text = ", ".join(f"{b - a:.0f} s from {at(a)}" for a, b in gaps) or "none of 5 s or more"
    return f"I/O stalls: {text}"


def _fio_result(lab: Lab, tag: str) -> dict[str, Any]:
    lab.sh("h1", "while pgrep -x fio >/dev/null; do sleep 2; done", timeout=FIO_RUNTIME_S + 900)
    return fio.report_job(lab.sh("h1", f"cat /root/{tag}.json").stdout)


def _md5_on(lab: Lab, vm: str, vol: dict[str, Any]) -> str:
    lv = lab.sh(vm, f"lvs --noheadings -o lv_path -S lv_name=v_{vol['vol_id']}").stdout.strip()
    assert lv, f"{vm} has no LV for {vol['name']}"
    script = (
        f"dd if={lv} bs=1M skip={DATA_OFFSET_MIB} count={SIZE_MIB} iflag=direct status=none"
        " | md5sum | cut -d' ' -f1"
    )
    return lab.sh(vm, script, timeout=300).stdout.strip()


def _healthy(lab: Lab, vm: str, name: str, nodes: list[str]) -> dict[str, Any] | None:
    v = _show(lab, vm, name)
    good = sorted(v["in_sync"]) == sorted(nodes) and all(r["state"] == "in-sync" for r in v["replicas"])
    return v if good else None


def _figure(text: str) -> None:
    """Print a figure and append it, with the time and the test, to FIGURES."""
    print(f"\n{text}")
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC {test}: {text}\n")


_SYNC = "(?:recover|recovery|resync)"
_MD_LOG = re.compile(rf"\[\s*([0-9.]+)\]\s+md: (?:{_SYNC} of RAID array (\S+)|(\S+): {_SYNC} done)")


def _rebuild_s(lab: Lab, vm: str, vol: dict[str, Any]) -> float | None:
    """Seconds of the last rebuild of the volume's mirror on the primary `vm`, from md's own
    kernel log lines ("recover of RAID array mdN" -> "mdN: recover done."): the map's
    syncing state is sampled by node reports every few seconds and misses a short copy."""
    md = lab.sh(vm, f"readlink -f /dev/md/{mirror_id_for(vol['uuid'])}", check=False).stdout.strip()
    name = os.path.basename(md)
    if not name.startswith("md"):
        return None
    start: float | None = None
    took: float | None = None
    for line in lab.sh(vm, "dmesg", check=False).stdout.splitlines():
        m = _MD_LOG.match(line)
        if m is None:
            continue
        if m.group(2) == name:
            start = float(m.group(1))
        elif m.group(3) == name and start is not None:
            took, start = float(m.group(1)) - start, None
    return took


def _raw_copy_s(lab: Lab, vm: str, vol: dict[str, Any], nid: int) -> tuple[float, str] | None:
    """The rebuild's path without md: on the primary `vm`, dd (O_DIRECT both sides) the data
    area of its own leg onto node nid's replica namespace, the leg the rebuild wrote (the legs
    hold the same bytes, checked before, and no I/O runs: the copy changes nothing). Should the
    kernel refuse writes to a leg md holds, the same namespace is read instead. (seconds, how)"""
    lv = lab.sh(vm, f"lvs --noheadings -o lv_path -S lv_name=v_{vol['vol_id']}").stdout.strip()
    area = f"bs=1M count={SIZE_MIB} iflag=direct status=none"
    script = f"""
dev=
for b in /sys/block/nvme*; do
  case ${{b##*/}} in *c*) continue;; esac
  [ "$(cat $b/device/subsysnqn 2>/dev/null)" = "{replica_nqn(vol["uuid"], str(nid))}" ] && dev=/dev/${{b##*/}}
done
test -n "$dev"
test -n "{lv}"
s=$(date +%s%N)
if dd if={lv} of=$dev skip={DATA_OFFSET_MIB} seek={DATA_OFFSET_MIB} oflag=direct {area}; then how=write
else s=$(date +%s%N); dd if=$dev of=/dev/null skip={DATA_OFFSET_MIB} {area}; how=read; fi
echo $how $(( ($(date +%s%N) - s) / 1000000 ))"""
    res = lab.sh(vm, script, timeout=300, check=False)
    if res.rc != 0:
        print(f"raw copy on {vm} not measured: {res.stdout} {res.stderr}")
        return None
    how, ms = res.stdout.split()[-2:]
    return int(ms) / 1000, how


def _rebuild_vs_raw(lab: Lab, new: str, old: str, vol: dict[str, Any], nid: int) -> str:
    """'rebuild X MB/s (...) vs raw Y MB/s (...)': a figure, never a reason to fail the test."""
    mb = SIZE_MIB * 1024 * 1024 / 1e6

    def rate(s: float | None) -> str:
        return f"{mb / s:.1f} MB/s ({SIZE_MIB} MiB in {s:.1f} s)" if s else "not measured"

    try:
        rebuild_s = _rebuild_s(lab, new, vol)
        raw_s = _raw_copy_s(lab, new, vol, nid)
    except Exception as exc:  # the figure is context; the test checks the data
        return f"rebuild vs raw copy not measured: {exc!r}"
    raw = "not measured"
    if raw_s is not None:
        arrow = "->" if raw_s[1] == "write" else "<-"
        raw = f"{rate(raw_s[0])} (dd O_DIRECT, {new}'s leg {arrow} {old}'s replica namespace over NVMe/TCP)"
    return f"rebuild {rate(rebuild_s)} (md recover start -> done, primary's kernel log) vs raw {raw}"


STARVED = (
    "lab test that runs with NODEOS_LAB_FULL=1: a starved 4-VM lab flaps leases after a power-off "
    "(issue 29; docs/testing.md)"
)


def _gap_s(job: dict[str, Any]) -> float:
    """The longest I/O: writes and verify reads both stall on a dead path."""
    return max(float(job[rw]["lat_ns"]["max"]) for rw in ("read", "write")) / 1e9


# Both with NODEOS_LAB_FULL=1 only, for now: on CI's machine (4 TCG VMs on 2 cores) the starved
# cluster's leases flapped after the power-off (the leader called even itself down, the only
# in-sync primary was fenced and lifted over and over) and the host's I/O stood still past the
# test's 30 min (CI of 2026-11-29; reproduced here). That is issue 29's "no flapping on a slow
# but live node"; the test comes back to CI with that fix.
@pytest.mark.parametrize(
    "replicas",
    [pytest.param(n, marks=pytest.mark.skipif(not LAB_FULL, reason=STARVED)) for n in (2, 3)],
)
def test_primary_powered_off_io_moves_on_and_the_old_primary_rejoins_copied_in_full(
    lab: Lab, cluster: dict[str, Any], replicas: int
) -> None:
    """With 3 replicas the remaining two stay in sync: one is promoted, the other stays its leg."""
    name = f"fo{replicas}"
    vol, nodes, dev = _volume_under_fio(lab, cluster, name, replicas)
    old = vol["primary"]
    others = [n for n in nodes if n != old]

    offset = _h1_clock(lab)
    lab.kill(old)
    killed_at = time.monotonic()
    quiet = Unanswered()
    moved = _wait(
        "the primary moved",
        lambda: (v := quiet.show(lab, others[0], name)) and v["primary"] in others and v,
        timeout=300,
    )
    took = time.monotonic() - killed_at
    marks = {"power-off": killed_at, "failover seen": time.monotonic()}
    new = moved["primary"]
    assert moved["epoch"] == vol["epoch"] + 1 and sorted(moved["in_sync"]) == sorted(others), moved
    node_old = next(n for n in ok(lab, new, "node", "list") if n["name"] == old)
    assert node_old["lease"] == "down", node_old
    events = _events(lab, new)
    assert any(e["kind"] == "failover" and e.get("epoch") == moved["epoch"] for e in events), events[-10:]

    # The old primary is powered on again at once (as an operator would): it boots while fio
    # still writes through the new primary, and must come back as a secondary, copied from it.
    lab.start(old, wait=False)
    marks["powered on"] = time.monotonic()
    job = _fio_result(lab, name)
    marks["fio done"] = time.monotonic()
    assert job["error"] == 0, job.get("error")  # zero verify errors, no I/O error
    assert job["write"]["io_bytes"] > 0
    print(
        f"\nprimary power-off ({replicas} replicas): failover seen by the console after {took:.1f} s "
        f"({quiet.note(killed_at)}); longest I/O {_gap_s(job):.1f} s"
    )
    lab.wait_ready(old)
    wait_daemon(lab, old)
    up_at = time.monotonic()
    back = _wait("the volume healthy again", lambda: _healthy(lab, new, name, nodes), timeout=900, every=5)
    healthy_s = time.monotonic() - up_at
    assert back["primary"] == new and back["epoch"] == moved["epoch"]
    ana = {n: "optimized" if n == new else "inaccessible" for n in nodes}
    assert {r["node"]: r["ana_state"] for r in back["replicas"]} == ana
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
    assert len(set(sums.values())) == 1, sums
    # Rebuild MB/s against a raw copy of the same size on the same path, in the same run.
    head = f"primary power-off ({replicas} replicas): failover seen after {took:.1f} s "
    head += f"({quiet.note(killed_at)}), longest I/O {_gap_s(job):.1f} s; "
    head += f"the old primary back: healthy {healthy_s:.0f} s after its daemon was up"
    marks["daemon seen up"] = up_at
    rebuild = _rebuild_vs_raw(lab, new, old, vol, int(node_old["id"]))
    _figure(f"{head}, {rebuild}; {_stalls(lab, name, marks, offset)}")
    # The device stays writable and consistent on the new primary with both legs back.
    check = fio.run(
        lab,
        "h1",
        "check",
        f"--filename={dev} --rw=randwrite --bs=4k --size={SIZE_MIB // 2}M --direct=1 --ioengine=libaio "
        "--iodepth=4 --verify=crc32c --do_verify=1 --verify_fatal=1",
    )
    assert check["error"] == 0, check
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_secondary_powered_off_volume_runs_degraded_and_resyncs(lab: Lab, cluster: dict[str, Any]) -> None:
    name = "fo2s"
    vol, nodes, dev = _volume_under_fio(lab, cluster, name)
    prim, sec = vol["primary"], next(n for n in nodes if n != vol["primary"])

    lab.kill(sec)
    degraded = _wait(
        "the secondary out of the in-sync set",
        lambda: (v := _show(lab, prim, name))["in_sync"] == [prim] and v,
        timeout=300,
    )
    assert degraded["primary"] == prim and degraded["epoch"] == vol["epoch"]  # no failover for a secondary
    lab.start(sec)
    wait_daemon(lab, sec)
    job = _fio_result(lab, "fo2s")
    assert job["error"] == 0, job.get("error")
    print(f"\nsecondary power-off: longest I/O {_gap_s(job):.1f} s")
    back = _wait("the volume healthy again", lambda: _healthy(lab, prim, name, nodes), timeout=900, every=5)
    assert back["primary"] == prim
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
    assert len(set(sums.values())) == 1, sums
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_drain_moves_the_primary_then_the_replica_during_io_and_undrain_activates_the_node(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    name = "fo2d"
    vol, nodes, dev = _volume_under_fio(lab, cluster, name)
    prim, other = vol["primary"], next(n for n in nodes if n != vol["primary"])
    third = next(vm for vm in STORAGE if vm not in nodes)
    try:
        # Primaries first (a planned handoff), then the replica left on the node is re-placed.
        out = ok(lab, other, "node", "drain", prim, "--timeout", "900", timeout=1200)
        assert out["primaries"] == [] and out["secondaries"] == [], out
        moved = _show(lab, other, name)
        assert moved["primary"] == other and moved["epoch"] == vol["epoch"] + 1, moved
        assert sorted(r["node"] for r in moved["replicas"]) == sorted([other, third]), moved
        kinds = [e["kind"] for e in _events(lab, other) if e.get("volume") == vol["uuid"]]
        assert {"handoff", "failover", "replica_replaced"} <= set(kinds), kinds
        job = _fio_result(lab, "fo2d")
        assert job["error"] == 0, job.get("error")
        print(f"\ndrain (planned move): longest I/O {_gap_s(job):.1f} s")
    finally:
        ok(lab, other, "node", "undrain", prim)
    assert next(n for n in ok(lab, other, "node", "list") if n["name"] == prim)["state"] == "active"
    now = [other, third]
    back = _wait("the volume healthy again", lambda: _healthy(lab, other, name, now), timeout=900, every=5)
    assert back["primary"] == other
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in now}
    assert len(set(sums.values())) == 1, sums
    _wait("the drained node's replica deleted", lambda: not _has_lv(lab, prim, vol), timeout=300)
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)


def _placed_on(lab: Lab, vm: str, name: str, want: list[str]) -> dict[str, Any] | None:
    v = _show(lab, vm, name)
    return v if sorted(r["node"] for r in v["replicas"]) == sorted(want) else None


def _has_lv(lab: Lab, vm: str, vol: dict[str, Any]) -> bool:
    return bool(lab.sh(vm, f"lvs --noheadings -o lv_path -S lv_name=v_{vol['vol_id']}").stdout.strip())


GRACE_S = 30  # replace_after_s for the last test: hardware keeps the 600 s default
CONF = "/etc/nodeos/nodeosd.toml"


def _set_grace(lab: Lab, grace_s: int | None) -> None:
    """Rewrite every storage VM's replace_after_s and restart nodeosd, one VM at a time (the
    leader's value rules, and any of them may lead)."""
    line = f"echo 'replace_after_s = {grace_s}' >> {CONF}; " if grace_s else ""
    for vm in STORAGE:
        lab.sh(vm, f"sed -i '/^replace_after_s/d' {CONF}; {line}systemctl restart nodeosd", timeout=300)
        wait_daemon(lab, vm)
    _wait(
        "every node up",
        lambda: all(n["lease"] == "up" for n in ok(lab, "s1", "node", "list")),
        timeout=300,
    )


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_a_secondary_lost_past_the_grace_is_re_placed_on_the_third_vm_and_copied_in_full(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    _set_grace(lab, GRACE_S)
    try:
        name = "fo2r"
        vol, nodes, dev = _volume_under_fio(lab, cluster, name)  # writes go on during the copy
        prim, sec = vol["primary"], next(n for n in nodes if n != vol["primary"])
        third = next(vm for vm in STORAGE if vm not in nodes)

        lab.kill(sec)
        killed_at = time.monotonic()
        placed = _wait("the replica re-placed", lambda: _placed_on(lab, prim, name, [prim, third]), 600, 5)
        took = time.monotonic() - killed_at
        assert placed["primary"] == prim and placed["epoch"] == vol["epoch"], placed  # no failover
        evs = [e for e in _events(lab, prim) if e.get("volume") == vol["uuid"]]
        assert any(e["kind"] == "replica_replaced" for e in evs), evs[-10:]
        now = [prim, third]
        back = _wait("the new replica in sync", lambda: _healthy(lab, prim, name, now), timeout=900, every=5)
        copied = time.monotonic() - killed_at
        job = _fio_result(lab, "fo2r")
        assert job["error"] == 0, job.get("error")
        assert back["primary"] == prim
        lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
        sums = {vm: _md5_on(lab, vm, vol) for vm in now}
        assert len(set(sums.values())) == 1, sums
        print(
            f"\nsecondary lost (grace {GRACE_S} s): re-placed after {took:.0f} s, "
            f"in sync after {copied:.0f} s ({SIZE_MIB} MiB); longest I/O {_gap_s(job):.1f} s"
        )
        # The lost VM returns: its replica is no longer wanted and is deleted.
        lab.start(sec)
        wait_daemon(lab, sec)
        _wait("the old replica deleted", lambda: not _has_lv(lab, sec, vol), timeout=600, every=5)
        lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
    finally:
        for vm in STORAGE:  # a failure half-way may have left the lost VM off
            _ensure_running(lab, vm)
        _set_grace(lab, None)


def _journal(lab: Lab, vm: str, since: str) -> str:
    return lab.sh(vm, f"journalctl -u nodeosd --no-pager -o cat --since '{since}'", timeout=120).stdout


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_primary_cut_off_fences_itself_and_after_heal_is_copied_from_the_new_primary(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    """A split: the primary keeps running, cut off from the cluster and the host. It must fence
    itself (its front end inaccessible) before the others promote; after the heal it comes back
    as a secondary and its leg is copied from the new primary, not the other way round."""
    name = "fo2c"
    since = lab.sh("s1", "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    vol, nodes, dev = _volume_under_fio(lab, cluster, name)
    old, new = vol["primary"], next(n for n in nodes if n != vol["primary"])
    lab.cut(old)
    cut_at = time.monotonic()
    quiet = Unanswered()
    try:
        moved = _wait(
            "the primary moved", lambda: (v := quiet.show(lab, new, name)) and v["primary"] == new and v, 300
        )
        took = time.monotonic() - cut_at
        assert moved["epoch"] == vol["epoch"] + 1, moved
        # The cut-off node, still running, fenced itself: its front end refuses I/O.
        log = _journal(lab, old, since)
        assert "lease lost" in log and "fenced" in log, log[-2000:]
        ana = lab.sh(
            old, f"cat /sys/kernel/config/nvmet/subsystems/{vol['nqn']}/namespaces/1/ana_grpid"
        ).stdout
        assert ana.strip() == "2", (
            f"the cut-off primary's namespace is in ANA group {ana!r}, not inaccessible"
        )
    finally:
        lab.heal(old)
    job = _fio_result(lab, "fo2c")
    assert job["error"] == 0, job.get("error")
    print(
        f"\nprimary cut off: failover seen after {took:.1f} s ({quiet.note(cut_at)}); "
        f"longest I/O {_gap_s(job):.1f} s"
    )
    back = _wait("the volume healthy again", lambda: _healthy(lab, new, name, nodes), timeout=900, every=5)
    assert back["primary"] == new
    log = _journal(lab, old, since)
    assert "demoting to secondary" in log and "own leg wiped" in log, log[-2000:]
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
    assert len(set(sums.values())) == 1, sums
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)


def _kernel_md_failures(lab: Lab, vm: str, since: str) -> list[float]:
    """Unix times of md failing a leg on `vm` since `since` (kernel log)."""
    out = lab.sh(vm, f"journalctl -k --no-pager -o short-unix --since '{since}'", timeout=120).stdout
    return [float(ln.split()[0]) for ln in out.splitlines() if "Disk failure on" in ln]


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_a_secondary_cut_off_blocks_writes_until_the_map_drops_it_and_none_is_acked_degraded_before(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    """The primary cannot reach its replica: the leg's I/O blocks (no fast-fail), the agent
    reports the leg failed once its controller is not live for a while, and only once the map
    no longer counts the replica in sync does it drop the leg: md fails it no earlier than the
    map dropped it, so no write was acknowledged without the replica while it counted in sync.
    fio goes on through the host's multipath device with zero errors; after the heal the
    replica resyncs and the replicas hold the same bytes."""
    name = "fo2b"
    since = lab.sh("s1", "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    vol, nodes, dev = _volume_under_fio(lab, cluster, name)
    prim, sec = vol["primary"], next(n for n in nodes if n != vol["primary"])
    sec_id = next(int(r["node_id"]) for r in _show(lab, prim, name)["replicas"] if r["node"] == sec)
    cut_at = time.time()
    lab.cut(sec)
    try:
        _wait("the replica out of the in-sync set", lambda: _show(lab, prim, name)["in_sync"] == [prim], 300)

        def dropped_leg() -> str | None:
            text = _journal(lab, prim, since)
            return text if f"leg of node {sec_id} dropped" in text else None

        log = _wait("the primary dropping the blocked leg", dropped_leg, 180)
        assert "reported failed" in log, log[-2000:]
        dropped = [
            float(e["at"])
            for e in _events(lab, prim)
            if e.get("volume") == vol["uuid"]
            and e.get("node") == sec_id
            and e["kind"] in ("replica_out_of_sync", "replica_failed")
            and float(e["at"]) >= cut_at - 5
        ]
        md_fail = _kernel_md_failures(lab, prim, since)
        assert dropped and md_fail, (dropped, md_fail)
        print(
            f"\nsecondary cut: map dropped the replica {min(dropped) - cut_at:.1f} s after the cut, "
            f"md failed its leg {min(md_fail) - cut_at:.1f} s after"
        )
        assert min(md_fail) >= min(dropped), (
            "md failed the leg (acks degraded) while the map counted it in sync"
        )
    finally:
        lab.heal(sec)
    job = _fio_result(lab, name)
    assert job["error"] == 0, job.get("error")
    print(f"secondary cut: longest I/O {_gap_s(job):.1f} s")
    back = _wait("the volume healthy again", lambda: _healthy(lab, prim, name, nodes), timeout=900, every=5)
    assert back["primary"] == prim
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
    assert len(set(sums.values())) == 1, sums
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)


NO_RESTART = "/run/systemd/system/nodeosd.service.d/no-restart.conf"


def _front_group(lab: Lab, vm: str, nqn: str) -> str:
    """The ANA group of the volume's front end on `vm`: 1 optimized, 2 inaccessible."""
    path = f"/sys/kernel/config/nvmet/subsystems/{nqn}/namespaces/1/ana_grpid"
    return lab.sh(vm, f"cat {path}").stdout.strip()


def _host_path_state(lab: Lab, nqn: str, addr: str) -> str:
    """The ANA state h1 sees on its path to `addr`."""
    script = f"""
for c in /sys/class/nvme/nvme*; do
  [ "$(cat $c/subsysnqn 2>/dev/null)" = "{nqn}" ] || continue
  case "$(cat $c/address)" in *traddr={addr},*|*traddr={addr}) cat $c/nvme*c*n1/ana_state 2>/dev/null;; esac
done"""
    return lab.sh("h1", script).stdout.strip()


@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_primary_daemon_killed_fences_its_front_end_at_once_and_the_volume_fails_over(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    """nvmet and md outlive a killed nodeosd: without a fence the old primary would stay ANA
    optimized while the leader promotes the other replica (two writable primaries). The unit's
    ExecStopPost (`nodeos-fence`) turns its front end inaccessible at once; restarts are off
    for the test, so the daemon stays dead past its lease and the volume fails over."""
    name = "fo2k"
    vol, nodes, dev = _volume_under_fio(lab, cluster, name)
    old, new = vol["primary"], next(n for n in nodes if n != vol["primary"])
    assert _front_group(lab, old, vol["nqn"]) == "1"
    dropin = "[Service]\\nRestart=no\\n"  # + "ExecStopPost=\\n": no fence, and the test fails
    lab.sh(old, f"mkdir -p {NO_RESTART.rsplit('/', 1)[0]}; printf '{dropin}' > {NO_RESTART}")
    lab.sh(old, "systemctl daemon-reload", timeout=120)
    since = lab.sh(old, "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    try:
        lab.sh(old, "systemctl kill -s KILL nodeosd")
        killed_at = time.monotonic()
        _wait(
            "the old primary fenced", lambda: _front_group(lab, old, vol["nqn"]) == "2", timeout=30, every=0.5
        )
        fenced_s = time.monotonic() - killed_at
        assert lab.exec(old, ["systemctl", "is-active", "nodeosd"]).stdout.strip() != "active"
        # nodeos-fence logs once it is done, which may be after configfs showed the group.
        _wait(
            "nodeos-fence's journal line",
            lambda: re.search(r"fenced \d+ replicated front end.*" + name, _journal(lab, old, since)),
            timeout=60,
            every=1,
        )
        timing = lab.sh(
            old,
            f"journalctl -u nodeosd --no-pager -o short-monotonic --since '{since}'"
            " | grep -E 'Main process exited|Control process|fenced' || true",
        ).stdout
        print(f"\n{old}'s journal, death to fence:\n{timing}")
        _wait(
            "h1 sees its path to the old primary inaccessible",
            lambda: _host_path_state(lab, vol["nqn"], lab.addr(old)) == "inaccessible",
            timeout=60,
            every=1,
        )
        quiet = Unanswered()
        moved = _wait(
            "the primary moved", lambda: (v := quiet.show(lab, new, name)) and v["primary"] == new and v, 300
        )
        took = time.monotonic() - killed_at
        assert moved["epoch"] == vol["epoch"] + 1, moved
        assert _front_group(lab, old, vol["nqn"]) == "2"  # md still runs there; the host cannot write
        job = _fio_result(lab, name)
        assert job["error"] == 0, job.get("error")
        print(
            f"\nprimary daemon killed: fenced (seen in configfs) after {fenced_s:.1f} s, failover seen "
            f"after {took:.1f} s ({quiet.note(killed_at)}); longest I/O {_gap_s(job):.1f} s"
        )
    finally:
        lab.sh(old, f"rm -f {NO_RESTART}; systemctl daemon-reload; systemctl start nodeosd", timeout=300)
        wait_daemon(lab, old)
    back = _wait("the volume healthy again", lambda: _healthy(lab, new, name, nodes), timeout=900, every=5)
    assert back["primary"] == new
    assert {r["node"]: r["ana_state"] for r in back["replicas"]} == {new: "optimized", old: "inaccessible"}
    lab.sh("h1", f"sync; blockdev --flushbufs {dev}")
    sums = {vm: _md5_on(lab, vm, vol) for vm in nodes}
    assert len(set(sums.values())) == 1, sums
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
