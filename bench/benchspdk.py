"""The real nvmf_tgt an SPDK benchmark runs against: started, waited for until it answers on its
RPC socket, and stopped (SIGTERM, then SIGKILL) whatever happens in the run; and the raw
volume create the benchmarks compare nodeos against."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nodeos.dataplane.base import Listener
from nodeos.dataplane.select import spdk_answers
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.client import SpdkRpc

GIB = 1 << 30


def start_target(
    bin_dir: Path, work: Path, args: list[str], nice: int = 0, binary: Path | None = None
) -> subprocess.Popen[bytes]:
    """nvmf_tgt (or `binary`: nodeos-tgt) with `args` on work/spdk.sock (its log in
    work/nvmf_tgt.log), once it answers."""
    sock = work / "spdk.sock"
    log = open(work / "nvmf_tgt.log", "ab")  # noqa: SIM115  (the target's whole life)
    proc = subprocess.Popen(
        [str(binary or bin_dir / "nvmf_tgt"), *args, "-r", str(sock)],
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )
    deadline = time.monotonic() + 60
    while not spdk_answers(str(sock)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"nvmf_tgt did not answer:\n{(work / 'nvmf_tgt.log').read_text()[-2000:]}")
        time.sleep(0.2)
    return proc


def stop_target(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def target(
    bin_dir: Path, work: Path, args: list[str], nice: int = 0, binary: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_target(bin_dir, work, args, nice, binary)
    try:
        yield proc
    finally:
        stop_target(proc)


def raw_create(rpc: SpdkRpc, lvs: str, listener: Listener, i: int) -> str:
    """The 4 RPCs a volume needs at least (thin lvol of 1 GiB, subsystem, namespace, TCP listener),
    one after the other on one connection, as SPDK's rpc.py sends them. Returns the NQN."""
    nqn = f"nqn.2014-08.io.nodeos:raw:{i}"
    for method, params in (
        rq.lvol_create(lvs, f"raw{i}", GIB),
        rq.create_subsystem(nqn, f"RAW{i:016d}", "raw", allow_any_host=False, ana_reporting=True),
        rq.add_ns(nqn, f"{lvs}/raw{i}", 1),
        rq.add_listener(nqn, listener),
    ):
        rpc.call(method, params)
    return nqn


def raw_delete(rpc: SpdkRpc, lvs: str, i: int) -> None:
    rpc.call(*rq.delete_subsystem(f"nqn.2014-08.io.nodeos:raw:{i}"))
    rpc.call(*rq.lvol_delete(f"{lvs}/raw{i}"))
