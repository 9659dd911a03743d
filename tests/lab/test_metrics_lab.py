"""/metrics on a storage VM (kernel data plane): a volume's write counters grow by what a GPU
node wrote through NVMe/TCP with fio, as the operator's Prometheus would scrape them.

Prometheus itself scrapes real daemons in the process tier (tests/process/
test_metrics_prometheus.py); here the counters are read from the VM's own /metrics endpoint
(the lab's VMs sit in a private network namespace the host's Prometheus does not reach)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeos.lab import Lab
from tests.lab.dataplane_helpers import connect, connected, device_of, disconnect, wait_for
from tests.lab.node_helpers import ok, wait_daemon

pytestmark = pytest.mark.lab
LAB = "one"  # shared (tests/lab/shared_labs.py): s1 with 2 drives, h1, h2
MIB = 1024 * 1024
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
