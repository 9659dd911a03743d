"""Failover with TLS on every path (issue 28): failover must never need plain text.

h1 is `tls required`, so its 2-replica volume is exported on each replica node's TLS port only
(4421, TLS 1.3; no plain TCP, no RDMA). h1 connects to both nodes with `nvme connect --tls`
(tlshd does the handshake, the key in its .nvme keyring), fio writes with crc32c verify through
the multipath device, and the primary's VM is powered off: I/O moves to the other node over its
TLS path with zero verify errors, and when the old primary is back its path returns over TLS
too (its node puts the host's PSK in its keyring again before it exports). A plain-text connect
is refused throughout. Run with NODEOS_LAB_FULL=1, as the plain power-off test it mirrors
(tests/lab/test_failover.py says why).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodeos_devtools.lab import Lab
from tests.lab.mirror_helpers import host_paths
from tests.lab.node_helpers import nodeos, ok, wait_daemon
from tests.lab.shared_labs import LAB_FULL
from tests.lab.test_failover import (
    CONNECT_OPTS,
    SIZE_MIB,
    STARVED,
    Unanswered,
    _ensure_running,
    _fio_result,
    _gap_s,
    _head,
    _healthy,
    _ok_retrying,
    _show,
    _start_fio,
    _wait,
)

pytestmark = [pytest.mark.lab, pytest.mark.skipif(not LAB_FULL, reason=STARVED)]
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")
NAME = "fotls"


@pytest.fixture(scope="module")
def tls_host(lab: Lab) -> Iterator[dict[str, Any]]:
    """Pools everywhere and h1 registered `tls required` (compat: Debian 13's nvme-cli 2.13);
    the volume, the host and the pools removed at the end, h1's keys cleared."""
    for vm in STORAGE:
        wait_daemon(lab, vm)
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    host = lab.spec("h1").hostnqn
    added = ok(lab, "s1", "host", "add", host, "--tls", "required", "--tls-derivation", "compat")
    try:
        yield {"host": host, "key": added["tls_key"]}
    finally:
        for vm in STORAGE:
            _ensure_running(lab, vm)
        lab.sh(
            "h1",
            "pkill -x fio || true; nvme disconnect-all || true; keyctl clear %:.nvme 2>/dev/null || true",
            check=False,
        )
        nodeos(lab, "s1", "volume", "delete", NAME, "--force")
        nodeos(lab, "s1", "host", "remove", host)
        for vm in STORAGE:
            nodeos(lab, vm, "pool", "delete", "p")


# docs/operations.md, "Host settings": a path that must outlast a node's reboot never gives up
# (the first lab run, with test_failover's 60 s, lost the old primary's path 60 s into its boot).
KEEP_OPTS = CONNECT_OPTS.replace("--ctrl-loss-tmo=60", "--ctrl-loss-tmo=-1")


def _tls_connect(lab: Lab, vm: str, nqn: str, tls: bool = True) -> tuple[int, str]:
    port = "4421" if tls else "4420"
    argv = f"nvme connect -t tcp -a {lab.addr(vm)} -s {port} -n {nqn} {KEEP_OPTS}" + (" --tls" if tls else "")
    r = lab.sh("h1", argv, timeout=240, check=False)
    return r.rc, r.stdout + r.stderr


def _ports(lab: Lab, nqn: str) -> dict[str, tuple[str, str]]:
    """{storage VM: (path state, service id)} of h1's paths of nqn."""
    by_addr = {lab.addr(vm): vm for vm in STORAGE}
    out = {}
    for p in host_paths(lab, nqn):
        addr = re.search(r"traddr=([^,]+)", p["address"])
        svc = re.search(r"trsvcid=([^,]+)", p["address"])
        out[by_addr.get(addr.group(1) if addr else "", p["address"])] = (
            p["state"],
            svc.group(1) if svc else "",
        )
    return out


def test_primary_powered_off_with_tls_on_every_path_io_moves_on_and_the_path_returns_over_tls(
    lab: Lab, tls_host: dict[str, Any]
) -> None:
    host = tls_host["host"]
    _ok_retrying(lab, "volume", "create", NAME, "--size", f"{SIZE_MIB}MiB", "--replicas", "2")
    vol = _wait("the volume ready", lambda: (v := _show(lab, "s1", NAME))["state"] == "ready" and v, 300)
    nqn, nodes = vol["nqn"], [r["node"] for r in vol["replicas"]]
    _ok_retrying(lab, "volume", "grant", NAME, "--host", host)
    lab.sh("h1", "systemctl start tlshd && systemctl is-active tlshd", timeout=120)
    lab.exec(
        "h1",
        ["sh", "-ec", 'KEY=$(cat); nvme check-tls-key --keydata="$KEY" --hostnqn=$1 --subsysnqn=$2 --insert',
         "-", host, nqn],
        120, input=tls_host["key"], check=True,
    )  # fmt: skip
    for vm in nodes:
        rc, out = _tls_connect(lab, vm, nqn, tls=False)
        assert rc != 0, f"a plain-text connect to {vm} was accepted: {out}"
        rc, out = _tls_connect(lab, vm, nqn)
        assert rc == 0, f"TLS connect to {vm}: {out}"
    _wait(
        "a live TLS path to both nodes",
        lambda: _ports(lab, nqn) == {vm: ("live", "4421") for vm in nodes},
        180,
    )
    dev = "/dev/" + _wait("the multipath device", lambda: _head(lab, nqn), timeout=180)
    _start_fio(lab, dev, NAME)
    time.sleep(15)  # writes flowing through the primary's mirror to both legs

    old = vol["primary"]
    (other,) = [n for n in nodes if n != old]
    lab.kill(old)
    killed_at = time.monotonic()
    quiet = Unanswered()
    moved = _wait(
        "the primary moved", lambda: (v := quiet.show(lab, other, NAME)) and v["primary"] == other and v, 300
    )
    took = time.monotonic() - killed_at
    assert moved["epoch"] == vol["epoch"] + 1, moved
    lab.start(old, wait=False)
    job = _fio_result(lab, NAME)
    assert job["error"] == 0, job.get("error")  # zero verify errors, no I/O error, over TLS alone
    assert job["write"]["io_bytes"] > 0
    lab.wait_ready(old)
    wait_daemon(lab, old)
    _wait("the volume healthy again", lambda: _healthy(lab, other, NAME, nodes), timeout=900, every=5)
    # The old primary's path came back by itself, over TLS; plain text is still refused there.
    _wait(f"h1's path to {old} live over TLS", lambda: _ports(lab, nqn).get(old) == ("live", "4421"), 600, 5)
    assert all(svc == "4421" for _, svc in _ports(lab, nqn).values()), _ports(lab, nqn)
    rc, out = _tls_connect(lab, old, nqn, tls=False)
    assert rc != 0, f"a plain-text connect to {old} was accepted after its reboot: {out}"
    print(
        f"\nprimary power-off with TLS on every path: failover seen after {took:.1f} s "
        f"({quiet.note(killed_at)}), longest I/O {_gap_s(job):.1f} s, zero verify errors; "
        f"{old}'s path back over TLS"
    )
    lab.sh("h1", f"nvme disconnect -n {nqn}", timeout=120)
