"""Published volumes (issue 13) on three storage VMs, as an operator and a GPU node see them.

A volume holding an ext4 image with files of random data is snapshotted and published to all
three nodes: the snapshot's node holds it already (a thin clone), the two others are filled
over NVMe/TCP from the joined source and join only once their sha256 equals the source's.
Two GPU nodes, granted once each, connect through different nodes' discovery ports and each
sees one multipath device with three optimized paths; at the same time both read the whole
device (the recorded sha256) and then mount it read-only with the round-robin policy and read
every file (same bytes); every node's read counters moved; a write from either host is refused
by the target; unpublish is refused while a host is connected and removes everything once they
are disconnected and revoked.

A second published volume from the same snapshot: a storage VM is powered off while both hosts
read the whole device over and over; every read of either completes with the recorded sha256,
the map shows that replica not serving (2/3) and, when the VM is back, serving again; the hosts
reconnect their paths and read from it again."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nodeos_devtools.lab import Lab
from tests.lab.mirror_helpers import host_paths
from tests.lab.node_helpers import nodeos, ok, wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

# Passed in the lab (with two GPU nodes: 2026-11-27 15:19-15:37 UTC, docs/benchmarks.md "Published
# volumes"); its ~15 min (two copies, a storage VM's reboot) do not fit CI's budget beside the
# failover tests.
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
# The shared lab only when it runs: a skipped module counted among cluster3's users would keep
# that lab up until the session ends (tests/lab/conftest.py counts modules, not skips).
LAB = "cluster3" if LAB_FULL else {}
STORAGE = ("s1", "s2", "s3")
HOSTS = ("h1", "h2")  # GPU nodes reading at once (cluster3 has two with NODEOS_LAB_FULL=1)
SIZE_MIB = 64
MIB = 1 << 20
CONNECT_OPTS = "--keep-alive-tmo=5 --ctrl-loss-tmo=30 --reconnect-delay=2"


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> Iterator[dict[str, Any]]:
    for vm in STORAGE:
        wait_daemon(lab, vm)
    for vm in STORAGE:
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    hosts = {h: lab.spec(h).hostnqn for h in HOSTS}
    for nqn in hosts.values():
        ok(lab, "s1", "host", "add", nqn)
    made: list[tuple[str, str]] = []
    try:
        yield {"hosts": hosts, "made": made}
    finally:
        for h in HOSTS:
            lab.exec(h, ["sh", "-c", "umount /mnt/model 2>/dev/null; nvme disconnect-all"], timeout=120)
        for kind, name in reversed(made):
            if kind == "published":
                nodeos(lab, "s1", "volume", "unpublish", name, "--force")
            else:
                nodeos(lab, "s1", "volume", "revoke", name, "--host", hosts["h1"])
                nodeos(lab, "s1", "volume", "delete", name, "--force")
        for nqn in hosts.values():
            nodeos(lab, "s1", "host", "remove", nqn)
        for vm in STORAGE:
            nodeos(lab, vm, "pool", "delete", "p")


def _each(fn: Callable[[str], Any]) -> dict[str, Any]:
    """fn(host) on both GPU nodes at once."""
    with ThreadPoolExecutor(len(HOSTS)) as pool:
        return dict(zip(HOSTS, pool.map(fn, HOSTS), strict=True))


def _head(lab: Lab, nqn: str, host: str = "h1") -> str:
    script = f"""
for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  if [ "$(cat $s/subsysnqn)" = "{nqn}" ]; then ls -d $s/nvme*n1 2>/dev/null | head -1 | xargs -r basename; fi
done"""
    return lab.sh(host, script).stdout.strip()


def _wait_paths(
    lab: Lab, nqn: str, n: int, timeout: float = 180, host: str = "h1"
) -> tuple[list[dict[str, str]], str]:
    deadline = time.monotonic() + timeout
    while True:
        paths, head = host_paths(lab, nqn, host), _head(lab, nqn, host)
        if len([p for p in paths if p["state"] == "live"]) == n and head:
            return paths, head
        if time.monotonic() > deadline:
            raise AssertionError(f"{host} sees {paths} (head {head!r}) for {nqn}, wanted {n} live paths")
        time.sleep(2)


def _sectors_read(lab: Lab, vm: str, uuid: str) -> int:
    """Sectors read from `vm`'s read-only view of the published volume (what nvmet serves)."""
    from nodeos.agent.published import view_id
    from nodeos.dataplane.mirror_names import VIEW_PREFIX

    dev = lab.sh(vm, f"basename $(readlink -f /dev/mapper/{VIEW_PREFIX}{view_id(uuid)})").stdout.strip()
    return int(lab.sh(vm, f"cat /sys/block/{dev}/stat").stdout.split()[2])


def _ext4_image() -> tuple[bytes, str]:
    """An ext4 file system holding three files of random data, made here (the appliance image has
    no mkfs.ext4), gzipped; and `md5sum shard*` of its files."""
    mke2fs = shutil.which("mke2fs") or "/sbin/mke2fs"
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "root"
        root.mkdir()
        lines = []
        for i in (1, 2, 3):
            data = os.urandom(MIB)
            (root / f"shard{i}").write_bytes(data)
            lines.append(f"{hashlib.md5(data).hexdigest()}  shard{i}\n")
        img = Path(d) / "model.img"
        subprocess.run(
            [mke2fs, "-q", "-F", "-t", "ext4", "-d", str(root), str(img), "8M"],
            check=True,
            capture_output=True,
        )
        return gzip.compress(img.read_bytes()), "".join(lines)


def _make_image(lab: Lab, cluster: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A volume holding an ext4 image with random files; their md5 sums. One replica: its
    snapshot is on one node, so the two others are both copied (fed by the source at once)."""
    vol = ok(lab, "s1", "volume", "create", "modelsrc", "--size", f"{SIZE_MIB}MiB")
    cluster["made"].append(("volume", "modelsrc"))
    ok(lab, "s1", "volume", "grant", "modelsrc", "--host", cluster["hosts"]["h1"])
    lab.sh("h1", f"nvme connect-all -t tcp -a {lab.addr(vol['primary'])} -s 8009 {CONNECT_OPTS}", timeout=300)
    _, head = _wait_paths(lab, vol["nqn"], 1)
    blob, sums = _ext4_image()
    lab.exec("h1", ["sh", "-ec", "gunzip > /root/model.img"], input=blob, timeout=300, check=True)
    lab.sh(
        "h1", f"dd if=/root/model.img of=/dev/{head} bs=1M oflag=direct conv=fsync status=none", timeout=300
    )
    lab.sh("h1", f"nvme disconnect -n {vol['nqn']}", timeout=120)
    ok(lab, "s1", "volume", "revoke", "modelsrc", "--host", cluster["hosts"]["h1"])
    return vol, sums


def _snapshot(lab: Lab, cluster: dict[str, Any]) -> str:
    """Snapshot `modelsnap` of a volume holding the ext4 image, made once for the module; the
    md5 sums of the image's files."""
    if "sums" not in cluster:
        _, sums = _make_image(lab, cluster)
        ok(lab, "s1", "volume", "snapshot", "modelsrc", "modelsnap", timeout=600)
        cluster["made"].append(("snapshot", "modelsnap"))
        cluster["sums"] = sums
    return str(cluster["sums"])


def _round_robin(lab: Lab, nqn: str, host: str) -> None:
    policy = lab.sh(
        host,
        f"""for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  if [ "$(cat $s/subsysnqn)" = "{nqn}" ]; then echo round-robin > $s/iopolicy; cat $s/iopolicy; fi
done""",
    ).stdout.strip()
    assert policy == "round-robin", (host, policy)


def _unpublish(lab: Lab, cluster: dict[str, Any], name: str, nqn: str) -> None:
    """Disconnected and revoked (Debian's nvmet shows no connections: a granted host counts as
    connected), unpublished once the nodes report the hosts gone (within a pass)."""
    for h, hostnqn in cluster["hosts"].items():
        lab.sh(h, f"nvme disconnect -n {nqn}", timeout=120)
        ok(lab, "s1", "volume", "revoke", name, "--host", hostnqn)
    deadline = time.monotonic() + 60
    while True:
        rc, out = nodeos(lab, "s1", "volume", "unpublish", name)
        if rc == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert rc == 0, out
    cluster["made"].remove(("published", name))


def test_a_published_snapshot_is_read_through_every_node_and_never_written(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    sums = _snapshot(lab, cluster)

    started = time.monotonic()
    pub = ok(lab, "s2", "volume", "publish", "modelsnap", "model", "--timeout", "900", timeout=1000)
    cluster["made"].append(("published", "model"))
    publish_s = time.monotonic() - started
    reps = {r["node"]: r for r in pub["replicas"]}
    assert pub["state"] == "ready" and pub["kind"] == "published" and pub["read_only"], pub
    assert sorted(reps) == list(STORAGE) and pub["health"] == "3/3"
    assert all(
        r["joined"] and r["ana_state"] == "optimized" and r["sha256"] == pub["checksum"]
        for r in reps.values()
    )
    copied = [n for n, r in reps.items() if not r["seed"]]
    assert len(copied) == 2, reps  # the snapshot's node holds it; the two others were copied
    print(f"published to 3 nodes in {publish_s:.1f} s (two {SIZE_MIB} MiB copies over NVMe/TCP)")
    listed = {v["name"]: v for v in ok(lab, "s3", "volume", "list")}
    assert listed["model"]["kind"] == "published" and listed["model"]["health"] == "3/3"

    # Granted once per host; each host asks a different node's discovery controller.
    heads: dict[str, str] = {}
    for h, via in zip(HOSTS, ("s3", "s1"), strict=True):
        ok(lab, "s1", "volume", "grant", "model", "--host", cluster["hosts"][h])
        lab.sh(h, f"nvme connect-all -t tcp -a {lab.addr(via)} -s 8009 {CONNECT_OPTS}", timeout=300)
        paths, heads[h] = _wait_paths(lab, pub["nqn"], 3, host=h)
        assert sorted(p["ana"] for p in paths) == ["optimized"] * 3, (h, paths)
        _round_robin(lab, pub["nqn"], h)

    before = {vm: _sectors_read(lab, vm, pub["uuid"]) for vm in STORAGE}
    started = time.monotonic()
    wholes = _each(
        lambda h: lab.sh(
            h, f"dd if=/dev/{heads[h]} bs=1M iflag=direct status=none | sha256sum", timeout=600
        ).stdout.split()[0]
    )
    both_s = time.monotonic() - started
    assert wholes == {h: pub["checksum"] for h in HOSTS}, wholes
    files = _each(
        lambda h: (
            lab.sh(
                h,
                f"mkdir -p /mnt/model && mount -o ro,noload /dev/{heads[h]} /mnt/model && "
                "(cd /mnt/model && md5sum shard*); umount /mnt/model",
                timeout=600,
            ).stdout
        )
    )
    assert files == {h: sums for h in HOSTS}, files
    after = {vm: _sectors_read(lab, vm, pub["uuid"]) for vm in STORAGE}
    moved = {vm: after[vm] - before[vm] for vm in STORAGE}
    print(f"{len(HOSTS)} hosts read the whole device at once in {both_s:.1f} s; sectors per node: {moved}")
    assert all(v > 0 for v in moved.values()), moved  # every replica served part of the reads
    # Each host's whole read went to the targets (O_DIRECT): the nodes served both in all.
    assert sum(moved.values()) >= len(HOSTS) * SIZE_MIB * MIB // 512, moved

    for h in HOSTS:
        w = lab.exec(
            h, ["dd", "if=/dev/zero", f"of=/dev/{heads[h]}", "bs=4k", "count=1", "oflag=direct"], timeout=120
        )
        assert w.rc != 0, f"a write from {h} to a published volume succeeded: {w.stdout} {w.stderr}"
        print(f"write from {h} refused: {w.stderr.strip()}")
    again = _each(
        lambda h: lab.sh(
            h, f"dd if=/dev/{heads[h]} bs=1M iflag=direct status=none | sha256sum", timeout=600
        ).stdout.split()[0]
    )
    assert again == {h: pub["checksum"] for h in HOSTS}, again

    rc, out = nodeos(lab, "s1", "volume", "unpublish", "model")
    assert rc == 1 and all(n in out["error"]["message"] for n in cluster["hosts"].values()), out
    _unpublish(lab, cluster, "model", pub["nqn"])
    for vm in STORAGE:
        assert "v_pub" not in lab.sh(vm, "lvs --noheadings -o lv_name").stdout
        assert lab.exec(vm, ["test", "-e", f"/sys/kernel/config/nvmet/subsystems/{pub['nqn']}"]).rc != 0


# Runs on each GPU node: reads the whole device over and over until told to stop, one line per pass:
# start, end, exit status of the pipeline (dd's failure included), sha256.
READER = r"""
dev=$1; out=/tmp/pubread.txt
rm -f /tmp/pubread.stop $out /tmp/pubread.err
while [ ! -e /tmp/pubread.stop ]; do
  t0=$(date +%s.%N)
  s=$(set -o pipefail; dd if=$dev bs=1M iflag=direct status=none 2>>/tmp/pubread.err | sha256sum | cut -c1-64)
  rc=$?
  echo "$t0 $(date +%s.%N) $rc $s" >> $out
done
"""


def _passes(lab: Lab, host: str) -> list[tuple[float, float, int, str]]:
    out = []
    for line in lab.sh(host, "cat /tmp/pubread.txt 2>/dev/null || true").stdout.splitlines():
        t0, t1, rc, *sha = line.split()
        out.append((float(t0), float(t1), int(rc), sha[0] if sha else ""))
    return out


def _wait_for(what: str, check: Any, timeout: float, every: float = 3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def test_a_storage_vm_powered_off_during_the_reads_the_host_reads_on_and_the_replica_serves_again(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    victim = "s3"
    _snapshot(lab, cluster)
    pub = ok(lab, "s1", "volume", "publish", "modelsnap", "model2", "--timeout", "900", timeout=1000)
    cluster["made"].append(("published", "model2"))
    assert pub["state"] == "ready" and pub["health"] == "3/3", pub
    # A loss timeout longer than the VM's reboot: the hosts reconnect by themselves when it is back.
    opts = "--keep-alive-tmo=5 --ctrl-loss-tmo=1800 --reconnect-delay=3"
    heads: dict[str, str] = {}
    dmesg_at: dict[str, int] = {}
    for h in HOSTS:
        ok(lab, "s1", "volume", "grant", "model2", "--host", cluster["hosts"][h])
        lab.sh(h, f"nvme connect-all -t tcp -a {lab.addr('s1')} -s 8009 {opts}", timeout=300)
        _, heads[h] = _wait_paths(lab, pub["nqn"], 3, host=h)
        _round_robin(lab, pub["nqn"], h)
        dmesg_at[h] = int(lab.sh(h, "dmesg | wc -l").stdout)
        lab.exec(h, ["sh", "-c", "cat > /tmp/pubread.sh"], input=READER, timeout=60, check=True)
    for h in HOSTS:
        lab.exec(
            h,
            ["sh", "-c", f"setsid bash /tmp/pubread.sh /dev/{heads[h]} > /dev/null 2>&1 < /dev/null &"],
            timeout=60,
            check=True,
        )

    def fewest() -> int:  # whole reads done by the host that has done fewest
        return min(len(_passes(lab, h)) for h in HOSTS)

    killed = started = False
    try:
        _wait_for("a first whole read on each host", lambda: fewest() >= 1, 600)

        lab.kill(victim)
        killed_at, killed = time.monotonic(), True

        def show() -> dict[str, Any] | None:  # None while the cluster elects a new leader
            rc, v = nodeos(lab, "s1", "volume", "show", "model2")
            return v if rc == 0 else None

        def down() -> dict[str, Any] | None:
            v = show()
            if v is None:
                return None
            rep = next(r for r in v["replicas"] if r["node"] == victim)
            return v if v["health"] == "2/3" and not rep["joined"] and rep["ana_state"] is None else None

        shown = _wait_for(f"the map shows {victim}'s replica not serving", down, 300)
        seen_s = time.monotonic() - killed_at
        at_down = fewest()
        # At least one whole read on each host with the VM off, begun after the map said so.
        _wait_for("two more reads on each host with the VM off", lambda: fewest() >= at_down + 2, 900)
        for h in HOSTS:
            live = [p for p in host_paths(lab, pub["nqn"], h) if p["state"] == "live"]
            assert len(live) == 2 and all(lab.addr(victim) not in p["address"] for p in live), (h, live)
        off = {h: _passes(lab, h) for h in HOSTS}
        print(
            f"{victim} powered off: the map showed it not serving after {seen_s:.1f} s "
            f"(health {shown['health']}); whole reads so far "
            + ", ".join(
                f"{h}: {len(ps)} (longest {max(b - a for a, b, *_ in ps):.1f} s)" for h, ps in off.items()
            )
        )

        lab.start(victim)
        started = True
        wait_daemon(lab, victim)
        up_at = time.monotonic()

        def serving() -> dict[str, Any] | None:
            v = show()
            return v if v is not None and v["health"] == "3/3" else None

        back = _wait_for(f"{victim}'s replica serving again", serving, 900, every=5)
        serving_s = time.monotonic() - up_at
        assert all(r["joined"] and r["ana_state"] == "optimized" for r in back["replicas"]), back
        # A host's own reconnect attempts (every 3 s) bring the path back, unless one reached
        # the node's target before the export was there: nvmet answers that with "do not retry"
        # and the host drops the controller; then the operator's connect-all does it.
        how: dict[str, str] = {}
        for h in HOSTS:
            how[h] = "by itself"
            try:
                _wait_paths(lab, pub["nqn"], 3, timeout=120, host=h)
            except AssertionError:
                how[h] = "after connect-all"
                lab.sh(h, f"nvme connect-all -t tcp -a {lab.addr('s1')} -s 8009 {opts}", timeout=300)
                _wait_paths(lab, pub["nqn"], 3, timeout=180, host=h)
        reconnect_s = time.monotonic() - up_at
        before = _sectors_read(lab, victim, pub["uuid"])
        n = fewest()
        _wait_for("two whole reads on each host with the VM back", lambda: fewest() >= n + 2, 900)
        moved = _sectors_read(lab, victim, pub["uuid"]) - before
        print(
            f"{victim} back: its replica serving {serving_s:.0f} s after its daemon answered, "
            f"the hosts' paths live ({how}) after {reconnect_s:.0f} s; it served {moved} sectors of "
            "the next reads"
        )
        assert moved > 0, "the returned replica serves none of the host's reads"
    finally:
        for h in HOSTS:
            lab.exec(h, ["touch", "/tmp/pubread.stop"], timeout=60)
        if killed and not started:
            lab.start(victim)  # the shared lab as found, for the modules after this one
    for h in HOSTS:
        _wait_for(
            f"the reader on {h} stopped",
            lambda h=h: not lab.sh(h, "pgrep -f 'bash /tmp/pubread[.]sh' || true").stdout.strip(),
            600,
        )
        passes = _passes(lab, h)
        bad = [p for p in passes if p[2] != 0 or p[3] != pub["checksum"]]
        errs = lab.sh(h, "cat /tmp/pubread.err 2>/dev/null || true").stdout.strip()
        assert not bad and not errs, (
            f"{h}: {len(bad)} of {len(passes)} reads failed or differed: {bad[:3]} {errs[-500:]}"
        )
        new = lab.sh(h, f"dmesg | tail -n +{dmesg_at[h] + 1}").stdout
        assert f"I/O error, dev {heads[h]}," not in new, (h, new[-2000:])
        print(f"{h}: {len(passes)} whole reads of the device, each with the recorded sha256, no I/O error")
    _unpublish(lab, cluster, "model2", pub["nqn"])
