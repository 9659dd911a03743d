"""/metrics on a storage VM (kernel data plane): a volume's write counters grow by what a GPU
node wrote through NVMe/TCP with fio, read from the VM's own endpoint and, as an operator would,
through a real Prometheus (Debian's `prometheus`, the shipped alert rules) asked over its HTTP
API: the volume's written bytes rise by at least what fio wrote. Prometheus runs in the lab's
network namespace (where the VMs are) and reaches s1's /metrics through a TCP relay in the VM
(tests/lab/metrics_helpers.py: a lab VM has no management network). NodeosNodeDown firing when
nodeosd on the VM is killed runs with NODEOS_LAB_FULL=1 only (the rule's 30 s `for` and a
restart under TCG); in CI the process tier (tests/process/test_metrics_prometheus.py) kills a
node under a real Prometheus and sees the alert fire."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeos_devtools.lab import Lab
from tests.lab.dataplane_helpers import connect, connected, device_of, disconnect, wait_for
from tests.lab.metrics_helpers import start_relay, stop_relay
from tests.lab.node_helpers import ok, start_unit, wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL
from tests.prometheus_helpers import PROMETHEUS, Prometheus

# With NODEOS_LAB_FULL=1 (CI's 60 minutes): in CI the process tier runs the same counters and
# alert under a real Prometheus (tests/process/test_metrics_prometheus.py).
pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)]
NO_PROMETHEUS = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package) not installed")
FULL_ONLY = pytest.mark.skipif(not LAB_FULL, reason=f"the alert waits out its 30 s `for`; {NOT_FULL}")
LAB = "one"  # shared (tests/lab/shared_labs.py): s1 with 2 drives, h1, h2
MIB = 1024 * 1024
FIO_MIB = 16
SCRAPE_S = 2.0  # scrape and rule evaluation interval: seconds, not minutes, of CI's lab budget
SCRAPE = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=30).read().decode())"


def scrape(lab: Lab) -> dict[tuple[str, str], float]:
    """{(sample name, volume label): value} of the nodeos_volume_* samples on s1."""
    url = ok(lab, "s1", "status")["observe"]["metrics_url"]  # where nodeosd says it serves them
    text = lab.exec("s1", ["python3", "-c", SCRAPE, url], check=True, timeout=120).stdout
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("nodeos_volume_") and "volume" in s.labels:
                out[(s.name, s.labels["volume"])] = float(s.value)
    return out


@pytest.fixture(scope="module")
def volume(lab: Lab) -> Iterator[dict]:
    wait_daemon(lab, "s1")
    nqn = lab.spec("h1").hostnqn
    ok(lab, "s1", "pool", "create", "mp1", "--drives", "all")
    ok(lab, "s1", "host", "add", nqn)
    ok(lab, "s1", "volume", "create", "mv1", "--size", "128MiB")
    ok(lab, "s1", "volume", "grant", "mv1", "--host", nqn)
    vol = ok(lab, "s1", "volume", "show", "mv1")
    try:
        yield vol
    finally:  # leave the shared lab as found
        disconnect(lab, "h1", vol["nqn"])
        ok(lab, "s1", "volume", "delete", "mv1", "--force")
        ok(lab, "s1", "host", "remove", nqn)
        ok(lab, "s1", "pool", "delete", "mp1")


def test_write_counter_grows_under_fio(lab: Lab, volume: dict) -> None:
    # The exporter learns the volume's block device within its 5 s background refresh.
    wait_for(
        "the volume's series on /metrics",
        lambda: any(k[0] == "nodeos_volume_writes_total" for k in scrape(lab)),
    )
    before = scrape(lab)
    vols = {v for (n, v) in before if n == "nodeos_volume_written_bytes_total"}
    assert len(vols) == 1, before
    vol = vols.pop()
    rc, text = connect(lab, "h1", "tcp", lab.addr("s1"), volume["nqn"])
    assert rc == 0, text
    dev = device_of(lab, "h1", volume["nqn"])
    lab.exec(
        "h1",
        ["fio", "--name=w", f"--filename={dev}", "--rw=write", "--bs=64k", "--size=16M", "--direct=1",
         "--ioengine=libaio", "--iodepth=4"],
        check=True,
        timeout=600,
    )  # fmt: skip
    after = scrape(lab)
    written = (
        after[("nodeos_volume_written_bytes_total", vol)] - before[("nodeos_volume_written_bytes_total", vol)]
    )
    writes = after[("nodeos_volume_writes_total", vol)] - before[("nodeos_volume_writes_total", vol)]
    assert written >= 16 * MIB, (before, after)
    assert writes >= 16 * MIB / (512 * 1024)  # at least one completed write per 512 KiB (merges allowed)
    assert (
        after[("nodeos_volume_write_time_seconds_total", vol)]
        > before[("nodeos_volume_write_time_seconds_total", vol)]
    )
    disconnect(lab, "h1", volume["nqn"])
    wait_for("h1 disconnected", lambda: not connected(lab, "h1", volume["nqn"]))


@pytest.fixture(scope="module")
def target(lab: Lab, volume: dict) -> Iterator[str]:
    """s1's /metrics as host:port on the lab network."""
    try:
        yield start_relay(lab, "s1")
    finally:
        stop_relay(lab, "s1")


@pytest.fixture(scope="module")
def prom(lab: Lab, target: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    p = Prometheus(tmp_path_factory.mktemp("prometheus"), [target], interval_s=SCRAPE_S, netns=lab.ns)
    try:
        p.wait("s1 scraped", lambda: p.value('up{job="nodeos"}') == 1.0, timeout=120)
        yield p
    finally:
        p.stop()


@NO_PROMETHEUS
def test_prometheus_sees_the_volume_write_counter_grow_under_fio(
    lab: Lab, volume: dict, prom: Prometheus
) -> None:
    # The exporter learns the volume's block device within its 5 s background refresh.
    series = prom.wait(
        "the volume's written-bytes series",
        lambda: prom.query("nodeos_volume_written_bytes_total"),
        timeout=120,
    )
    assert len(series) == 1, series
    sel = f'{{job="nodeos",volume="{series[0]["metric"]["volume"]}"}}'
    before = prom.value(f"nodeos_volume_written_bytes_total{sel}")
    assert before is not None
    rc, text = connect(lab, "h1", "tcp", lab.addr("s1"), volume["nqn"])
    assert rc == 0, text
    dev = device_of(lab, "h1", volume["nqn"])
    began = time.monotonic()
    lab.exec(
        "h1",
        ["fio", "--name=w", f"--filename={dev}", "--rw=write", "--bs=64k", f"--size={FIO_MIB}M", "--direct=1",
         "--ioengine=libaio", "--iodepth=4"],
        check=True,
        timeout=600,
    )  # fmt: skip
    disconnect(lab, "h1", volume["nqn"])

    def grown() -> float | None:
        v = prom.value(f"nodeos_volume_written_bytes_total{sel}")
        return v if v is not None and v >= before + FIO_MIB * MIB else None

    after = prom.wait("the counter grew by what fio wrote", grown, timeout=60)
    # As an operator would ask: over a window that starts before fio did (one scrape interval
    # and a margin), increase() says at least what fio wrote, and writes completed at a rate.
    window = f"{int(time.monotonic() - began + 3 * SCRAPE_S) + 5}s"
    increase = prom.value(f"increase(nodeos_volume_written_bytes_total{sel}[{window}])")
    assert increase is not None and increase >= FIO_MIB * MIB, (before, after, increase)
    writes = prom.value(f"increase(nodeos_volume_writes_total{sel}[{window}])")
    assert writes is not None and writes >= FIO_MIB * MIB / (512 * 1024), writes  # merges allowed
    busy = prom.value(f"rate(nodeos_volume_write_time_seconds_total{sel}[{window}])")
    assert busy is not None and busy > 0, busy
    wait_for("h1 disconnected", lambda: not connected(lab, "h1", volume["nqn"]))


@NO_PROMETHEUS
@FULL_ONLY
def test_node_down_alert_fires_when_nodeosd_is_killed(lab: Lab, target: str, prom: Prometheus) -> None:
    assert not prom.firing("NodeosNodeDown")
    # SIGKILL, then keep it down (systemd would restart it within 2 s; the rule waits 30 s).
    lab.sh("s1", "systemctl kill -s KILL nodeosd.service; systemctl stop nodeosd.service", timeout=300)
    try:
        firing = prom.wait("NodeosNodeDown firing", lambda: prom.firing("NodeosNodeDown"), timeout=120)
        assert [a["labels"]["instance"] for a in firing] == [target]
        assert firing[0]["labels"]["severity"] == "critical"
    finally:
        start_unit(lab, "s1")
    prom.wait("s1 scraped again", lambda: prom.value('up{job="nodeos"}') == 1.0, timeout=120)
    prom.wait("NodeosNodeDown resolved", lambda: not prom.firing("NodeosNodeDown"), timeout=60)
