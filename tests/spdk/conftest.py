"""Fixtures of the SPDK tier (`-m spdk`): a REAL nvmf_tgt from the build NODEOS_SPDK_DIR names.

The target is the one the image carries: nodeos-tgt (native/nodeos-tgt: SPDK's nvmf_tgt with its
RPC socket answered every 100 us), built against that build's tree by the first test that needs
it; NODEOS_SPDK_TARGET=nvmf_tgt runs SPDK's own binary instead (what nodeos-tgt replaces).

The target runs without hugepages and without a PCI scan (`--no-huge -s 1024 -u`), its
drives are sparse files (AIO bdevs, test drives), it listens on loopback TCP. Skipped with
the reason when NODEOS_SPDK_DIR is unset or holds no bin/nvmf_tgt. See docs/spdk.md.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from nodeos.dataplane.select import spdk_answers
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos_devtools import native_tgt

START_TIMEOUT_S = 60.0
TARGET_ENV = "NODEOS_SPDK_TARGET"
TARGETS = ("nodeos-tgt", "nvmf_tgt")


def spdk_dir() -> Path:
    d = os.environ.get("NODEOS_SPDK_DIR")
    if not d:
        pytest.skip("NODEOS_SPDK_DIR is not set: no SPDK build to test against (see docs/spdk.md)")
    root = Path(d)
    for cand in (root / "bin" / "nvmf_tgt", root / "build" / "bin" / "nvmf_tgt"):
        if cand.is_file():
            return cand.parent
    pytest.skip(f"NODEOS_SPDK_DIR={d} holds no bin/nvmf_tgt (nor build/bin/nvmf_tgt)")
    raise AssertionError  # unreachable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@cache
def target_binary(bin_dir: Path) -> Path:
    """The target binary the tests run: nodeos-tgt (built here against the build's tree), or
    SPDK's own nvmf_tgt when NODEOS_SPDK_TARGET says so."""
    choice = os.environ.get(TARGET_ENV, "").strip() or TARGETS[0]
    if choice not in TARGETS:
        raise pytest.UsageError(f"{TARGET_ENV}={choice}: allowed values: {', '.join(TARGETS)}")
    if choice == "nvmf_tgt":
        return bin_dir / "nvmf_tgt"
    tree = native_tgt.spdk_tree(bin_dir / "nvmf_tgt")
    if tree is None:
        pytest.fail(
            f"{bin_dir}/nvmf_tgt is not in an SPDK tree (no mk/spdk.common.mk above it): nodeos-tgt "
            f"cannot be built; {TARGET_ENV}=nvmf_tgt tests SPDK's own target"
        )
    return native_tgt.build(tree)


@dataclass
class SpdkTarget:
    bin_dir: Path
    sock: Path
    proc: subprocess.Popen[bytes]
    log: Path
    workdir: Path
    dp: SpdkDataPlane

    def tool(self, name: str) -> Path:
        p = self.bin_dir / name
        if not p.is_file():
            pytest.skip(f"{name} is not in {self.bin_dir}")
        return p

    def run_tool(self, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        # SPDK's initiator tools are DPDK apps too: no hugepages, no PCI scan.
        return subprocess.run(
            [str(self.tool(name)), *args], capture_output=True, text=True, timeout=timeout, check=False
        )


def start_target(
    bin_dir: Path,
    work: Path,
    extra_args: tuple[str, ...] = (),
    nice: int = 0,
    discovery_svcid: str | None = "8009",
    binary: Path | None = None,
) -> SpdkTarget:
    """A REAL target (`binary`, else target_binary's) on its own RPC socket in `work` (no
    hugepages, no PCI scan, one core)."""
    work.mkdir(parents=True, exist_ok=True)
    sock = work / "spdk.sock"
    log = work / "nvmf_tgt.log"
    cmd = [
        str(binary or target_binary(bin_dir)),
        "-u",
        "--no-huge",
        "-s",
        "1024",
        "-m",
        "0x1",
        "-r",
        str(sock),
        "--disable-cpumask-locks",  # several targets (and spdk_dd) share core 0
        *extra_args,
    ]
    with open(log, "ab") as lf:
        proc = subprocess.Popen(
            cmd, stdout=lf, stderr=subprocess.STDOUT, preexec_fn=(lambda: os.nice(nice)) if nice else None
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not spdk_answers(str(sock)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"nvmf_tgt did not answer on {sock}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    dp = SpdkDataPlane(
        str(sock), keys_dir=work / "keys", discovery_svcid=discovery_svcid, transports=("tcp", "rdma")
    )
    return SpdkTarget(bin_dir, sock, proc, log, work, dp)


def stop_target(t: SpdkTarget, sig: int = signal.SIGTERM) -> None:
    t.dp.close()
    if t.proc.poll() is not None:
        return
    t.proc.send_signal(sig)
    try:
        t.proc.wait(timeout=30)  # nvmf_tgt can take a few seconds to exit
    except subprocess.TimeoutExpired:
        t.proc.kill()
        t.proc.wait()


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("SPDK's nvmf_tgt needs root")


@pytest.fixture(scope="module")
def spdk_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpdkTarget]:
    bin_dir = spdk_dir()
    need_root()
    # Interrupt mode: idle, the target costs no CPU (these modules attach nothing over TCP
    # inside it: the initiators are SPDK's own tools, each a process of its own).
    target = start_target(bin_dir, tmp_path_factory.mktemp("spdk"), ("--interrupt-mode",), nice=19)
    try:
        yield target
    finally:
        stop_target(target)
