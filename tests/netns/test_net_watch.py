"""`nodeos net watch` and the readers behind it, on real veth devices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeos.errors import OperationFailed
from nodeos.net.dcb import RTNLGRP_DCB
from nodeos.net.dcbsock import DcbSocket, NoDcbSupport, subscribe_socket
from nodeos.net.netns import run_in
from nodeos.net.watch import read_ethtool_stats
from tests.netns.conftest import Netns, nodeos, write_config

pytestmark = pytest.mark.netns

CFG = '[[interfaces]]\nname = "va"\nmtu = 4000\n[qos]\nprofile = "none"\n'


def test_dcb_read_on_veth_names_the_interface(node: Netns) -> None:
    def read() -> None:
        with DcbSocket() as s:
            s.get("va")

    with pytest.raises(NoDcbSupport) as exc:
        run_in(node.name, read)
    assert "this NIC has no DCB support" in exc.value.message and "va" in exc.value.message


def test_dcb_read_of_a_missing_interface_says_so(node: Netns) -> None:
    def read() -> None:
        with DcbSocket() as s:
            s.get("nosuch0")

    with pytest.raises(OperationFailed) as exc:
        run_in(node.name, read)
    assert "nosuch0" in exc.value.message


def test_dcb_multicast_group_is_joined_in_the_namespace(node: Netns) -> None:
    def joined() -> bool:
        s = subscribe_socket()
        try:
            portid = s.getsockname()[0]
            # The kernel's own view: /proc/.../net/netlink lists each socket's groups (bit 22 = RTNLGRP_DCB).
            rows = Path("/proc/thread-self/net/netlink").read_text().splitlines()[1:]
            for row in rows:
                cols = row.split()
                if int(cols[1]) == 0 and int(cols[2]) == portid:
                    return bool(int(cols[3], 16) & (1 << (RTNLGRP_DCB - 1)))
            return False
        finally:
            s.close()

    assert run_in(node.name, joined)


def test_ethtool_counters_of_a_veth_are_read(node: Netns) -> None:
    stats = read_ethtool_stats("va", node.name)
    assert "peer_ifindex" in stats


def test_watch_reports_sync_then_drift(node: Netns, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, CFG)
    assert nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes").code == 0
    res = nodeos(
        "net",
        "watch",
        "--config",
        str(cfg),
        "--netns",
        node.name,
        "--count",
        "1",
        "--interval",
        "0.2",
        "--json",
    )
    assert res.code == 0, res.err
    events = [json.loads(line) for line in res.out.splitlines()]
    assert events[-1]["event"] == "in_sync"
    node.ip("link", "set", "va", "mtu", "1500")
    res = nodeos(
        "net",
        "watch",
        "--config",
        str(cfg),
        "--netns",
        node.name,
        "--count",
        "1",
        "--interval",
        "0.2",
        "--json",
    )
    events = [json.loads(line) for line in res.out.splitlines()]
    drift = [e for e in events if e["event"] == "drift"]
    assert drift and drift[-1]["drift"][0]["item"] == "va mtu"
