"""A GPU node that is told nothing (issue 28): h1 runs nvme-stas as nodeos ships its set-up
(nodeos/hostsetup/: stafd with mDNS and persistent discovery controllers, stacd), with no storage
address anywhere in its configuration. It finds every storage node over mDNS, connects the
volumes granted to it and no other, and then follows the cluster by itself through the
discovery controllers' change notices: a volume granted later appears, a revoked one goes, a
replica re-placed on another node (a drain) appears as a new path and the old path goes, while
fio writes and verifies through the volume all along (the re-placement, a full copy of a replica,
with NODEOS_LAB_FULL=1: CI's budget).

nvme-stas has no TLS (docs/operations.md, "Host settings"), so the volumes here are plain text;
TLS on the same lab is tests/lab/test_host_fabric.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from nodeos_devtools.lab import Lab, fio
from tests.lab.dataplane_helpers import device_of
from tests.lab.mirror_helpers import host_paths
from tests.lab.node_helpers import nodeos, ok, wait_daemon
from tests.lab.shared_labs import LAB_FULL, NOT_FULL

pytestmark = pytest.mark.lab
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"
SIZE_MIB = 64
# Under TCG stafd and stacd (Python, GLib) take tens of seconds for what hardware does in one.
FOLLOW_S = 300
FIO_RUNTIME_S = 900  # longer than the module's changes; stopped when they are done
STAS_UNITS = "avahi-daemon.service stafd.service stacd.service"
# stas masks nvme-cli's autoconnect rule with this while it runs (docs/network.md, "The GPU host").
STAS_UDEV_RULE = "/run/udev/rules.d/70-nvmf-autoconnect.rules"


def _traddr(address: str) -> str:
    m = re.search(r"traddr=([^,\s]+)", address)
    return m.group(1) if m else ""


def _live_nodes(lab: Lab, nqn: str) -> set[str]:
    """The storage VMs to which h1 has a live path of `nqn`."""
    by_addr = {lab.addr(vm): vm for vm in STORAGE}
    return {
        by_addr.get(_traddr(p["address"]), p["address"]) for p in host_paths(lab, nqn) if p["state"] == "live"
    }


def _any_path(lab: Lab, nqn: str) -> bool:
    return bool(host_paths(lab, nqn))


def _discovery_controllers(lab: Lab) -> set[tuple[str, str]]:
    """(storage VM, transport) of h1's live discovery controllers."""
    script = f"""
for c in /sys/class/nvme/nvme*; do
  [ "$(cat $c/subsysnqn 2>/dev/null)" = {DISCOVERY_NQN} ] || continue
  echo "$(cat $c/state)|$(cat $c/transport)|$(cat $c/address)"
done"""
    by_addr = {lab.addr(vm): vm for vm in STORAGE}
    out = set()
    for line in lab.sh("h1", script).stdout.split():
        state, transport, address = line.split("|", 2)
        if state == "live":
            out.add((by_addr.get(_traddr(address), address), transport))
    return out


def _until(what: str, cond: Callable[[], Any], timeout: float = FOLLOW_S) -> float:
    """Seconds until cond() holds; fails naming what did not happen."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"h1 did not get there by itself in {timeout} s: {what}")
        time.sleep(3)
    return time.monotonic() - t0


def _show(lab: Lab, name: str) -> dict[str, Any]:
    return dict(ok(lab, "s1", "volume", "show", name))


def _stas_log(lab: Lab) -> str:
    r = lab.sh(
        "h1", "journalctl -b -u stafd -u stacd --no-pager -o short-monotonic | tail -n 40", check=False
    )
    return r.stdout


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> Iterator[dict[str, Any]]:
    """Pools on every node, h1 registered (plain text), one 2-replica volume granted to it and one
    volume granted to no one; then nvme-stas started on h1. Everything undone at the end, stas
    stopped and its connections dropped (the shared lab's contract)."""
    host = lab.spec("h1").hostnqn
    made: list[str] = []
    nqns: list[str] = []
    for vm in STORAGE:
        wait_daemon(lab, vm)
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    try:
        ok(lab, "s1", "host", "add", host)
        made.append("host")
        for name, replicas in (("stas-a", "2"), ("stas-hidden", "1")):
            made.append(name)
            vol = ok(lab, "s1", "volume", "create", name, "--size", f"{SIZE_MIB}MiB", "--replicas", replicas)
            nqns.append(vol["nqn"])
        ok(lab, "s1", "volume", "grant", "stas-a", "--host", host)
        # The host as docs/network.md ("The GPU host") sets it up: the shipped files, no address.
        conf = lab.sh("h1", "cat /etc/stas/stafd.conf /etc/stas/stacd.conf").stdout
        assert "zeroconf=enabled" in conf and "kato=5" in conf, conf
        assert not re.search(r"^\s*controller\s*=", conf, re.M), "a storage address is configured on h1"
        # stas reads the host's identity from here; the lab's must have won over stas's own.
        assert lab.sh("h1", "cat /etc/nvme/hostnqn").stdout.strip() == host
        lab.sh("h1", f"systemctl start {STAS_UNITS}", timeout=300)
        yield {"host": host, "made": made, "nqns": nqns}
    finally:
        # stas first (it would connect again what is disconnected below), under `sh -e`: no step
        # may end the clean-up early (a pkill that finds no fio exits 1).
        stop = f"systemctl stop {STAS_UNITS}; pkill -x fio || true; rm -f {STAS_UDEV_RULE}"
        lab.sh("h1", stop, timeout=300)
        for nqn in nqns:
            lab.sh("h1", f"nvme disconnect -n {nqn} >/dev/null 2>&1 || true", timeout=120, check=False)
        lab.sh(
            "h1",
            f'for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = {DISCOVERY_NQN} ] && '
            "nvme disconnect -d $(basename $c); done; true",
            timeout=120,
            check=False,
        )
        for vm in STORAGE:
            nodeos(lab, vm, "node", "undrain", vm)
        for name in [m for m in made if m != "host"]:
            nodeos(lab, "s1", "volume", "delete", name, "--force")
        if "host" in made:
            nodeos(lab, "s1", "host", "remove", host)
        for vm in STORAGE:
            nodeos(lab, vm, "pool", "delete", "p")


def test_h1_finds_every_storage_node_over_mdns_and_connects_what_is_granted_and_nothing_else(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    took = _until(
        "a live TCP discovery controller to every storage node",
        lambda: {vm for vm, t in _discovery_controllers(lab) if t == "tcp"} >= set(STORAGE),
    )
    vol = _show(lab, "stas-a")
    nodes = {r["node"] for r in vol["replicas"]}
    took_io = _until(
        f"a live path of stas-a to each of {sorted(nodes)}", lambda: _live_nodes(lab, vol["nqn"]) >= nodes
    )
    dcs = sorted(_discovery_controllers(lab))
    print(f"\nstas: discovery controllers to every node after {took:.0f} s; stas-a on every replica after "
          f"{took_io:.0f} s more; h1's discovery controllers: {dcs}")  # fmt: skip
    hidden = _show(lab, "stas-hidden")
    assert not _any_path(lab, hidden["nqn"]), "h1 connected a volume granted to no one"


@contextmanager
def _fio_verifying(lab: Lab, what: str) -> Iterator[tuple[dict[str, Any], dict[str, float]]]:
    """stas-a connected on every replica node, fio writing and verifying through it while the
    block runs; yields (the volume, figures to fill); after it, fio stopped and zero errors."""
    vol = _show(lab, "stas-a")
    nqn = vol["nqn"]
    nodes = {r["node"] for r in vol["replicas"]}
    _until(f"a live path of stas-a to each of {sorted(nodes)}", lambda: _live_nodes(lab, nqn) >= nodes)
    dev = device_of(lab, "h1", nqn, timeout=120)
    lab.sh(
        "h1",
        f"rm -f /root/fio-stas.json; setsid -f fio --name=stas --filename={dev} --rw=randwrite --bs=4k "
        f"--size={SIZE_MIB // 2}M --direct=1 --ioengine=libaio --thread --iodepth=4 --time_based "
        f"--runtime={FIO_RUNTIME_S} --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_backlog=64 "
        "--output-format=json --output=/root/fio-stas.json </dev/null >/dev/null 2>&1; "
        "for i in $(seq 60); do pgrep -x fio && break; sleep 1; done; pgrep -x fio",
        timeout=120,
    )
    figures: dict[str, float] = {}
    try:
        yield vol, figures
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- stafd/stacd on h1:\n{_stas_log(lab)}") from None
    finally:
        wait = "for i in $(seq 120); do pgrep -x fio >/dev/null || break; sleep 1; done"
        lab.sh("h1", f"pkill -INT -x fio; {wait}", timeout=300, check=False)
    print("stas: by itself after the change (s): " + ", ".join(f"{k} {v:.0f}" for k, v in figures.items()))
    job = fio.report_job(lab.sh("h1", "cat /root/fio-stas.json").stdout)
    assert job["error"] == 0, f"fio: error {job['error']} through {what}"
    assert job["write"]["io_bytes"] > 0, job["write"]
    print(f"stas: fio wrote {job['write']['io_bytes'] >> 20} MiB with verify, zero errors")


def test_h1_follows_a_grant_and_a_revoke_by_itself_with_fio_verifying(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    with _fio_verifying(lab, "a grant and a revoke") as (_, figures):
        # Granted afterwards: the node's discovery controller tells h1, stacd connects it.
        cluster["made"].append("stas-later")
        later = ok(lab, "s1", "volume", "create", "stas-later", "--size", f"{SIZE_MIB}MiB")
        cluster["nqns"].append(later["nqn"])
        t0 = time.monotonic()
        ok(lab, "s1", "volume", "grant", "stas-later", "--host", cluster["host"])
        _until("the volume granted afterwards connected", lambda: bool(_live_nodes(lab, later["nqn"])))
        figures["grant"] = time.monotonic() - t0
        # Revoked: the node drops the host's controllers, the entry leaves the log, stacd lets go.
        t0 = time.monotonic()
        ok(lab, "s1", "volume", "revoke", "stas-later", "--host", cluster["host"])
        _until("the revoked volume gone from h1", lambda: not _any_path(lab, later["nqn"]))
        figures["revoke"] = time.monotonic() - t0


# The drain copies a replica in full: ~5 min under TCG (2026-12-02), past CI's budget.
@pytest.mark.skipif(not LAB_FULL, reason=NOT_FULL)
def test_h1_follows_a_re_placed_replica_by_itself_with_fio_verifying(
    lab: Lab, cluster: dict[str, Any]
) -> None:
    with _fio_verifying(lab, "a replica's re-placement") as (vol, figures):
        nqn = vol["nqn"]
        nodes = {r["node"] for r in vol["replicas"]}
        # Drain the node of stas-a's non-primary replica; its copy goes to the third node, which
        # h1 never had a path of stas-a to.
        primary = str(vol.get("primary") or vol["replicas"][0]["node"])
        (away,) = nodes - {primary}
        (new,) = set(STORAGE) - nodes
        assert new not in _live_nodes(lab, nqn)
        t0 = time.monotonic()
        ok(lab, "s1", "node", "drain", away, "--timeout", "1800", timeout=1900)
        drained = time.monotonic() - t0
        moved = _show(lab, "stas-a")
        assert {r["node"] for r in moved["replicas"]} == {primary, new}, moved["replicas"]
        _until(
            f"a live path of stas-a to {new}, where its replica was re-placed",
            lambda: new in _live_nodes(lab, nqn),
        )
        _until(f"the path of stas-a to {away}, drained, gone", lambda: away not in _live_nodes(lab, nqn))
        figures["re-placed"] = time.monotonic() - t0
        print(f"\nstas: drain of {away} took {drained:.0f} s")
