"""nodeos-tgt (native/nodeos-tgt) against SPDK's own nvmf_tgt from the same build (marker `spdk`):
the target the image carries is SPDK's target in every way an operator or nodeosd can see
(the same methods, the same NVMe/TCP export, the unit's --wait-for-rpc start), but for its RPC
socket, answered by a poller of its own every --rpc-poll-us instead of every 4 ms. Timings are
not asserted here: the round-trip figure is bench/spdk_rpc_rounds.py's (docs/benchmarks.md)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeos.dataplane.spdk.client import SpdkRpc
from tests.spdk.conftest import SpdkTarget, need_root, spdk_dir, start_target, stop_target, target_binary

pytestmark = pytest.mark.spdk

ARGS = ("--disable-cpumask-locks",)
POLLER = "fast_rpc_poll"


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    need_root()
    yield tmp_path


def _timed_pollers(t: SpdkTarget) -> dict[str, int]:
    """The app thread's timed pollers: name -> period in microseconds."""
    stats = t.dp.call(("thread_get_stats", None))
    rate = int(stats["tick_rate"])
    pollers = t.dp.call(("thread_get_pollers", None))["threads"][0]["timed_pollers"]
    return {p["name"]: round(int(p["period_ticks"]) * 1_000_000 / rate) for p in pollers}


def test_the_rpc_socket_is_polled_at_its_own_period_and_spdks_poll_is_left_alone(work: Path) -> None:
    t = start_target(spdk_dir(), work / "a", (*ARGS, "--rpc-poll-us", "250"), nice=10)
    try:
        periods = _timed_pollers(t)
        assert periods.get(POLLER) == 250, periods
        assert periods.get("rpc_subsystem_poll_servers") == 4000, periods  # SPDK's, untouched
        assert "RPC on" in t.log.read_text() and "answered every 250 us" in t.log.read_text()
    finally:
        stop_target(t)
    d = start_target(spdk_dir(), work / "b", (*ARGS, "--rpc-poll-us", "0"), nice=10)
    try:
        assert POLLER not in _timed_pollers(d)  # 0: SPDK's own poll only
    finally:
        stop_target(d)


def test_it_serves_every_method_spdks_target_serves(work: Path) -> None:
    ours = start_target(spdk_dir(), work / "ours", ARGS, nice=10)
    try:
        mine = set(ours.dp.call(("rpc_get_methods", None)))
        version = ours.dp.call(("spdk_get_version", None))["version"]
    finally:
        stop_target(ours)
    theirs = start_target(spdk_dir(), work / "theirs", ARGS, nice=10, binary=spdk_dir() / "nvmf_tgt")
    try:
        spdks = set(theirs.dp.call(("rpc_get_methods", None)))
        assert theirs.dp.call(("spdk_get_version", None))["version"] == version
    finally:
        stop_target(theirs)
    assert mine == spdks, (sorted(mine - spdks), sorted(spdks - mine))
    assert {"nvmf_create_subsystem", "bdev_raid_create", "bdev_lvol_snapshot"} <= mine


def test_a_connection_made_before_the_framework_starts_keeps_its_answers(work: Path) -> None:
    """The unit's start: the set-up's connection sends framework_start_init and reads its reply
    while the target moves its socket to the fast server; later connections reach that one."""
    t = start_target(spdk_dir(), work, (*ARGS, "--wait-for-rpc"), nice=10)
    setup = SpdkRpc(str(t.sock), timeout=30)
    try:
        assert setup.call("framework_start_init") is True
        assert setup.call("framework_wait_init") is True
        assert setup.call("spdk_get_version")["version"]  # the old connection still answered
        assert _timed_pollers(t).get(POLLER) == 100  # a new connection: the default period
        assert (work / "spdk.sock.nodeos-tgt.lock").exists()  # the fast server's (SPDK's lock scheme)
        assert not (work / "spdk.sock.nodeos-tgt").exists()  # its socket moved over the -r path
    finally:
        setup.close()
        stop_target(t)


def test_sigterm_exits_cleanly_and_leaves_no_socket_or_lock(work: Path) -> None:
    t = start_target(spdk_dir(), work, ARGS, nice=10)
    stop_target(t, signal.SIGTERM)
    assert t.proc.returncode == 0, t.log.read_text()[-2000:]
    left = sorted(p.name for p in work.iterdir() if p.name.startswith("spdk.sock"))
    assert left == [], left


def test_interrupt_mode_keeps_spdks_own_poll(work: Path) -> None:
    t = start_target(spdk_dir(), work, (*ARGS, "--interrupt-mode"), nice=19)
    try:
        assert "interrupt mode: RPC answered at SPDK's own poll" in t.log.read_text()
        assert not (work / "spdk.sock.nodeos-tgt.lock").exists()
        assert t.dp.call(("spdk_get_version", None))["version"]
    finally:
        stop_target(t)


@pytest.mark.parametrize("value", ["-1", "4001", "fast"])
def test_a_bad_poll_period_is_refused_naming_the_option(value: str, work: Path) -> None:
    binary = target_binary(spdk_dir())
    p = subprocess.run(
        [str(binary), "-u", "--no-huge", "-s", "1024", *ARGS, "-r", str(work / "s"), "--rpc-poll-us", value],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode != 0
    assert f"--rpc-poll-us: {value} is not a number of microseconds in 0..4000" in p.stdout + p.stderr
    assert not (work / "s").exists()
