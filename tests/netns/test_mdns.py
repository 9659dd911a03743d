"""mDNS advertisement with real sockets and real multicast between network namespaces.

    gpu [g0 10.7.0.2] ---- [stor0 10.7.0.1] sn [mgmt0 10.8.0.1] ---- [a0 10.8.0.2] adm

`sn` runs nodeosd's mDNS service (nodeos/mdns/service.py, its real zeroconf publisher) with a
stand-in node: listeners on both networks, the peer address on mgmt0 (so mgmt0 is management)
and, as avahi-daemon would, another socket holding the mDNS group on mgmt0. `gpu` and `adm`
each run a real browser (python-zeroconf's ServiceBrowser), in processes of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.netns.conftest import Netns, NetnsFactory

pytestmark = pytest.mark.netns

PROJECT = Path(__file__).resolve().parents[2]
NQN = "nqn.2014-08.org.nvmexpress.discovery"
Line = dict[str, Any]


class Proc:
    """A helper process (tests/netns/mdns_helper.py) in a namespace; its JSON lines, as they come."""

    def __init__(self, ns: Netns, tmp: Path, *args: str) -> None:
        self.err = tmp / f"{ns.name}-{args[0]}-{time.monotonic_ns()}.err"
        cmd = ["ip", "netns", "exec", ns.name, sys.executable, "-m", "tests.netns.mdns_helper", *args]
        self.p = subprocess.Popen(
            cmd,
            cwd=PROJECT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err.open("w"),
            text=True,
        )
        self.lines: list[Line] = []
        self._new = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for raw in self.p.stdout:
            with self._new:
                self.lines.append(json.loads(raw))
                self._new.notify_all()

    def wait(self, pred: Callable[[Line], bool], timeout: float, what: str, since: int = 0) -> Line:
        """The first line from `since` on (an index into `lines`) that `pred` takes; `at` is its index."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for i in range(since, len(self.lines)):
                    if pred(self.lines[i]):
                        return {**self.lines[i], "at": i}
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._new.wait(left)
        raise AssertionError(f"no {what} within {timeout} s; lines: {self.lines}\n{self.err.read_text()}")

    def send(self, cmd: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)


@dataclass
class Site:
    sn: Netns
    gpu: Netns
    adm: Netns
    tmp: Path
    procs: list[Proc]

    def run(self, ns: Netns, *args: str) -> Proc:
        proc = Proc(ns, self.tmp, *args)
        self.procs.append(proc)
        return proc

    def browser(self, ns: Netns, addr: str) -> Proc:
        b = self.run(ns, "browse", addr)
        b.wait(lambda x: x["event"] == "browsing", 30, "browser start")
        return b

    def serve(self, listeners: list[list[str]], **config: Any) -> Proc:
        cfg = {
            "node_name": "sn1",
            "listeners": listeners,
            "config": {"peer_listen": "10.8.0.1:7100", **config},
            "group_listeners": ["10.8.0.1"],  # avahi-daemon's socket on the management network
        }
        s = self.run(self.sn, "serve", json.dumps(cfg))
        s.wait(lambda x: x["event"] == "started", 30, "mDNS service start")
        return s


@pytest.fixture
def site(netns_factory: NetnsFactory, tmp_path: Path) -> Iterator[Site]:
    sn, gpu, adm = netns_factory(), netns_factory(), netns_factory()
    links = (("stor0", "g0", gpu, "10.7.0.1", "10.7.0.2"), ("mgmt0", "a0", adm, "10.8.0.1", "10.8.0.2"))
    for mine, peer, ns, a, b in links:
        sn.ip("link", "add", mine, "type", "veth", "peer", "name", peer)
        sn.ip("link", "set", peer, "netns", ns.name)
        sn.ip("addr", "add", f"{a}/24", "dev", mine)
        sn.ip("link", "set", mine, "up")
        ns.ip("addr", "add", f"{b}/24", "dev", peer)
        ns.ip("link", "set", peer, "up")
    s = Site(sn, gpu, adm, tmp_path, [])
    try:
        yield s
    finally:
        for p in s.procs:
            p.close()


def added(name: str, addresses: list[str] | None = None) -> Callable[[Line], bool]:
    def pred(x: Line) -> bool:
        if x["event"] not in ("add", "update") or x["name"] != name or "txt" not in x:
            return False
        return addresses is None or x["addresses"] == addresses

    return pred


def removed(name: str) -> Callable[[Line], bool]:
    return lambda x: x["event"] == "remove" and x["name"] == name


TCP = "sn1-stor0-tcp._nvme-disc._tcp.local."
ROCE = "sn1-stor0-roce._nvme-disc._tcp.local."


def test_storage_side_sees_tp8009_records_management_side_nothing_and_stop_says_goodbye(site: Site) -> None:
    gpu = site.browser(site.gpu, "10.7.0.2")
    adm = site.browser(site.adm, "10.8.0.2")
    sn = site.serve([["tcp", "10.7.0.1"], ["rdma", "10.7.0.1"], ["tcp", "10.8.0.1"]])
    for name, p in ((TCP, "tcp"), (ROCE, "roce")):
        x = gpu.wait(added(name), 20, f"{name} on the storage side")
        assert x["txt"] == {"p": p, "nqn": NQN}
        assert x["port"] == 8009 and x["addresses"] == ["10.7.0.1"]
        assert x["server"] == "sn1-stor0-0a1b2c.local."
    # A browser that starts now on the management network asks (its first query wants a unicast
    # answer): nothing answers it, though another socket of sn holds the group there.
    late = site.browser(site.adm, "10.8.0.2")
    time.sleep(4)
    assert [x for x in adm.lines + late.lines if x["event"] != "browsing"] == []
    sn.send("status")
    st = sn.wait(lambda x: x["event"] == "status", 10, "status")["status"]
    assert {(a["interface"], a["p"]) for a in st["advertised"]} == {("stor0", "tcp"), ("stor0", "roce")}
    assert any("mgmt0 is a management interface" in n for n in st["notes"]) and st["problems"] == []
    # Stop: goodbyes (TTL 0) reach the storage side at once, not after the records' TTL.
    sn.send("stop")
    assert sn.wait(lambda x: x["event"] == "stopped", 15, "stop")["took_s"] < 5
    gpu.wait(removed(TCP), 5, "goodbye for tcp")
    gpu.wait(removed(ROCE), 5, "goodbye for roce")
    assert [x for x in adm.lines + late.lines if x["event"] != "browsing"] == []


def test_drain_withdraws_undrain_announces_again_and_a_new_address_is_followed(site: Site) -> None:
    gpu = site.browser(site.gpu, "10.7.0.2")
    sn = site.serve([["tcp", "10.7.0.1"], ["tcp", "10.7.0.9"]])  # 10.7.0.9: not on stor0 yet
    at = gpu.wait(added(TCP, ["10.7.0.1"]), 20, "the record")["at"]
    sn.send("drain")
    at = gpu.wait(removed(TCP), 10, "goodbye on drain", since=at)["at"]
    sn.send("undrain")
    at = gpu.wait(added(TCP, ["10.7.0.1"]), 15, "the record again after undrain", since=at)["at"]
    site.sn.ip("addr", "add", "10.7.0.9/24", "dev", "stor0")
    at = gpu.wait(added(TCP, ["10.7.0.1", "10.7.0.9"]), 20, "the record with the new address", since=at)["at"]
    # The address the responder was bound to goes: a new responder, bound to what is left (the
    # kernel keeps 10.7.0.9, a secondary of 10.7.0.1/24, only when it promotes secondaries).
    site.sn.exec("sysctl", "-qw", "net.ipv4.conf.stor0.promote_secondaries=1")
    site.sn.ip("addr", "del", "10.7.0.1/24", "dev", "stor0")
    at = gpu.wait(added(TCP, ["10.7.0.9"]), 20, "the record without the old address", since=at)["at"]
    time.sleep(1.5)  # the announcements the browser heard end
    sn.send("status")
    st = sn.wait(lambda x: x["event"] == "status", 10, "status")["status"]
    assert st["problems"] == [] and [a["addresses"] for a in st["advertised"]] == [["10.7.0.9"]]
    sn.send("stop")
    gpu.wait(removed(TCP), 10, "goodbye on stop", since=at)


def test_management_network_carries_the_records_only_when_configured(site: Site) -> None:
    adm = site.browser(site.adm, "10.8.0.2")
    site.serve([["tcp", "10.7.0.1"], ["tcp", "10.8.0.1"]], mdns_management=True)
    x = adm.wait(added("sn1-mgmt0-tcp._nvme-disc._tcp.local."), 20, "the record on mgmt0")
    assert x["addresses"] == ["10.8.0.1"] and x["txt"] == {"p": "tcp", "nqn": NQN}
    time.sleep(2)
    assert {x["name"] for x in adm.lines if x["event"] != "browsing"} == {
        "sn1-mgmt0-tcp._nvme-disc._tcp.local."
    }


def test_an_ipv6_storage_network_gets_its_aaaa_records(netns_factory: NetnsFactory, tmp_path: Path) -> None:
    sn, gpu = netns_factory(), netns_factory()
    sn.ip("link", "add", "stor0", "type", "veth", "peer", "name", "g0")
    sn.ip("link", "set", "g0", "netns", gpu.name)
    sn.ip("addr", "add", "2001:db8:7::1/64", "dev", "stor0", "nodad")
    sn.ip("link", "set", "stor0", "up")
    gpu.ip("addr", "add", "2001:db8:7::2/64", "dev", "g0", "nodad")
    gpu.ip("link", "set", "g0", "up")
    site = Site(sn, gpu, gpu, tmp_path, [])
    try:
        b = site.browser(gpu, "2001:db8:7::2")
        cfg = {"node_name": "sn1", "listeners": [["tcp", "2001:db8:7::1"]], "config": {}}
        s = site.run(sn, "serve", json.dumps(cfg))
        at = b.wait(added(TCP, ["2001:db8:7::1"]), 30, "the record over IPv6")["at"]
        s.send("stop")
        b.wait(removed(TCP), 10, "goodbye over IPv6", since=at)
    finally:
        for p in site.procs:
            p.close()
