"""Network-namespace fixtures: every test gets its own uniquely named namespaces with veth
pairs, removed afterwards even when the test fails."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nodeos.net.mgmt import icmp_echo
from nodeos.net.netns import run_in

_counter = itertools.count()


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


@dataclass
class Netns:
    name: str

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("ip", "-n", self.name, *args, check=check)

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", self.name, *args, check=check)

    def sysctl(self, key: str) -> str:
        return self.exec("cat", "/proc/sys/" + key.replace(".", "/")).stdout.strip()


@dataclass
class NetnsFactory:
    created: list[str] = field(default_factory=list)

    def __call__(self) -> Netns:
        name = f"nodeos-t{os.getpid()}-{next(_counter)}"
        sh("ip", "netns", "add", name)
        self.created.append(name)
        ns = Netns(name)
        ns.ip("link", "set", "lo", "up")
        return ns

    def cleanup(self) -> None:
        for name in self.created:
            sh("ip", "netns", "del", name, check=False)


@pytest.fixture
def netns_factory() -> Iterator[NetnsFactory]:
    if os.geteuid() != 0:
        pytest.skip("network namespace tests need root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed")
    f = NetnsFactory()
    try:
        yield f
    finally:
        f.cleanup()


@pytest.fixture
def node(netns_factory: NetnsFactory) -> Netns:
    """A namespace holding a 4-queue veth pair: `va` (ours, down) and `vb` (the peer, up)."""
    ns = netns_factory()
    ns.ip(
        "link",
        "add",
        "va",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "vb",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
    )
    ns.ip("link", "set", "vb", "up")
    return ns


@pytest.fixture
def pair(netns_factory: NetnsFactory) -> tuple[Netns, Netns]:
    """node `va` 10.0.0.1/24 <-> peer `vb` 10.0.0.2/24 in two namespaces."""
    node, peer = netns_factory(), netns_factory()
    node.ip("link", "add", "va", "type", "veth", "peer", "name", "vb")
    node.ip("link", "set", "vb", "netns", peer.name)
    node.ip("addr", "add", "10.0.0.1/24", "dev", "va")
    node.ip("link", "set", "va", "up")
    peer.ip("addr", "add", "10.0.0.2/24", "dev", "vb")
    peer.ip("link", "set", "vb", "up")
    assert run_in(node.name, lambda: any(icmp_echo("10.0.0.2") for _ in range(10)))
    return node, peer


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def nodeos(*args: str, stdin: str | None = None) -> CliResult:
    """Run the real `nodeos` CLI as a separate process."""
    res = subprocess.run(
        [sys.executable, "-m", "nodeos.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
        check=False,
    )
    return CliResult(res.returncode, res.stdout, res.stderr)


def write_config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "net.toml"
    p.write_text(text)
    return p
