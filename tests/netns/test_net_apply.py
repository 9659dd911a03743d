"""`nodeos net plan/apply/verify` against real kernels in network namespaces (veth)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import struct
import threading
from pathlib import Path

import pytest

from nodeos.net.netns import run_in
from tests.netns.conftest import Netns, NetnsFactory, nodeos, write_config

pytestmark = pytest.mark.netns

# Congestion controls a namespace may choose are the host's allowed list; use one of them so
# the test runs on kernels without dctcp (the dctcp case is tested on its own below).
BASE = """
[[interfaces]]
name = "va"
mtu = 9000
addresses = ["192.0.2.11/24", "2001:db8::11/64"]
routes = [{{dst = "198.51.100.0/24", gateway = "192.0.2.1"}}]
[qos]
profile = "tcp-dctcp"
congestion_control = "{cc}"
route_congestion_control = "{cc}"
qdisc = "mq"
storage_ports = []  # DSCP marking has its own test (it needs nft)
"""


def allowed_cc(ns: Netns) -> str:
    allowed = ns.sysctl("net.ipv4.tcp_allowed_congestion_control").split()
    current = ns.sysctl("net.ipv4.tcp_congestion_control")
    others = [c for c in allowed if c != current]
    if not others:
        pytest.skip("only one congestion control allowed in a namespace here")
    return others[0]


def test_apply_sets_everything_and_verify_reads_it_back(node: Netns, tmp_path: Path) -> None:
    cc = allowed_cc(node)
    cfg = write_config(tmp_path, BASE.format(cc=cc))
    plan = nodeos("net", "plan", "--config", str(cfg), "--netns", node.name, "--json")
    assert plan.code == 0, plan.err
    kinds = [c["kind"] for c in json.loads(plan.out)["changes"]]
    assert {"sysctl", "mtu", "link", "address_add", "route", "qdisc"} <= set(kinds)

    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes", "--json")
    assert res.code == 0, res.err
    link = json.loads(node.ip("-j", "-d", "link", "show", "va").stdout)[0]
    assert link["mtu"] == 9000 and "UP" in link["flags"] and link["qdisc"] == "mq"
    addrs = {
        f"{a['local']}/{a['prefixlen']}"
        for a in json.loads(node.ip("-j", "addr", "show", "va").stdout)[0]["addr_info"]
        if a["scope"] == "global"
    }
    assert addrs == {"192.0.2.11/24", "2001:db8::11/64"}
    route = node.ip("route", "show", "198.51.100.0/24").stdout
    assert "via 192.0.2.1" in route and f"congctl {cc}" in route and "ecn" in route
    assert node.sysctl("net.ipv4.tcp_ecn") == "1"
    assert node.sysctl("net.ipv4.tcp_congestion_control") == cc
    assert (
        len(node.exec("tc", "qdisc", "show", "dev", "va").stdout.strip().splitlines()) == 5
    )  # mq + 4 queues

    ok = nodeos("net", "verify", "--config", str(cfg), "--netns", node.name, "--json")
    assert ok.code == 0, ok.out + ok.err
    assert json.loads(ok.out) == {"in_sync": True, "drift": [], "warnings": []}
    again = nodeos("net", "plan", "--config", str(cfg), "--netns", node.name, "--json")
    assert json.loads(again.out)["changes"] == []  # idempotent: nothing left to do


def test_verify_reports_each_drifted_item_with_exit_3(node: Netns, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, BASE.format(cc=allowed_cc(node)))
    assert nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes").code == 0
    # Someone else changes the system behind our back.
    node.ip("link", "set", "va", "mtu", "1500")
    node.ip("addr", "del", "192.0.2.11/24", "dev", "va")
    node.exec("sysctl", "-qw", "net.ipv4.tcp_ecn=0")
    res = nodeos("net", "verify", "--config", str(cfg), "--netns", node.name, "--json")
    assert res.code == 3
    items = {d["item"]: d for d in json.loads(res.out)["drift"]}
    assert items["va mtu"]["expected"] == 9000 and items["va mtu"]["actual"] == 1500
    assert items["va address_add"]["expected"] == "192.0.2.11/24"
    assert items["net.ipv4.tcp_ecn sysctl"]["actual"] == "0"
    human = nodeos("net", "verify", "--config", str(cfg), "--netns", node.name)
    assert human.code == 3 and "va: mtu 1500 -> 9000" in human.out
    # apply repairs it, verify is clean again
    assert nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes").code == 0
    assert nodeos("net", "verify", "--config", str(cfg), "--netns", node.name).code == 0


def test_sysctls_stay_inside_the_namespace(node: Netns, tmp_path: Path) -> None:
    host_ecn = Path("/proc/sys/net/ipv4/tcp_ecn").read_text().strip()
    cfg = write_config(tmp_path, BASE.format(cc=allowed_cc(node)))
    assert nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes").code == 0
    assert node.sysctl("net.ipv4.tcp_ecn") == "1"
    assert Path("/proc/sys/net/ipv4/tcp_ecn").read_text().strip() == host_ecn


def test_failed_step_rolls_back_what_was_done(node: Netns, tmp_path: Path) -> None:
    """A qdisc the kernel lacks fails the apply after MTU/address changes: they are undone."""
    kinds = node.exec("tc", "qdisc", "replace", "dev", "va", "root", "skbprio", check=False)
    if kinds.returncode == 0:
        pytest.skip("this kernel has sch_skbprio; the test needs a qdisc the kernel lacks")
    ecn_before = node.sysctl("net.ipv4.tcp_ecn")
    cc_before = node.sysctl("net.ipv4.tcp_congestion_control")
    text = BASE.format(cc=allowed_cc(node)).replace('qdisc = "mq"', 'qdisc = "skbprio"')
    cfg = write_config(tmp_path, text)
    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes")
    assert res.code == 1
    assert "skbprio" in res.err and "rolled back" in res.err
    link = json.loads(node.ip("-j", "link", "show", "va").stdout)[0]
    assert link["mtu"] == 1500 and "UP" not in link["flags"]
    assert "192.0.2.11" not in node.ip("addr", "show", "va").stdout
    assert node.ip("route", "show", "198.51.100.0/24").stdout.strip() == ""
    assert node.sysctl("net.ipv4.tcp_ecn") == ecn_before
    assert node.sysctl("net.ipv4.tcp_congestion_control") == cc_before


def test_dctcp_profile_defaults(node: Netns, tmp_path: Path) -> None:
    """The stock tcp-dctcp profile: applies where dctcp exists, else says so and changes nothing."""
    cfg = write_config(
        tmp_path, '[[interfaces]]\nname = "va"\nmtu = 9000\n[qos]\nprofile = "tcp-dctcp"\nqdisc = "mq"\n'
    )
    available = node.sysctl("net.ipv4.tcp_available_congestion_control").split()
    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes")
    if "dctcp" in available:
        assert res.code == 0, res.err
        assert node.sysctl("net.ipv4.tcp_congestion_control") == "dctcp"
    else:
        assert res.code == 1
        assert "'dctcp' is not available in this kernel" in res.err and "nothing was changed" in res.err
        assert json.loads(node.ip("-j", "link", "show", "va").stdout)[0]["mtu"] == 1500


def test_roce_profile_on_a_nic_without_dcb_says_so(node: Netns, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path, '[[interfaces]]\nname = "va"\nmtu = 9000\n[qos]\nprofile = "roce-lossless"\n'
    )
    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes")
    assert res.code == 1
    assert "this NIC has no DCB support" in res.err and "interface va" in res.err
    assert json.loads(node.ip("-j", "link", "show", "va").stdout)[0]["mtu"] == 1500  # nothing applied
    ver = nodeos("net", "verify", "--config", str(cfg), "--netns", node.name, "--json")
    assert ver.code == 3
    assert any(d["item"] == "va dcb" for d in json.loads(ver.out)["drift"])


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[[interfaces]]\nname = "ens9"\n[qos]\nprofile = "none"\n', "interfaces[0].name"),
        ('[[interfaces]]\nname = "va"\nmtu = 9000\n[qos]\nroce_priority = 9\n', "qos.roce_priority"),
        ('[[interfaces]]\nname = "va"\nmtu = 9000\n[qos]\nroce_dscp = 64\n', "qos.roce_dscp"),
        ('[[interfaces]]\nname = "va"\nmtu = 9000\n[qos]\nroce_share = 70\n', "qos.roce_share"),
        ('[[interfaces]]\nname = "va"\nmtu = 99000\n[qos]\nprofile = "none"\n', "interfaces[0].mtu"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_changes_nothing(
    node: Netns, tmp_path: Path, text: str, field: str
) -> None:
    before = node.ip("-j", "-d", "link", "show", "va").stdout
    cfg = str(write_config(tmp_path, text))
    for cmd in (["plan"], ["apply", "--yes"], ["verify"]):
        res = nodeos("net", *cmd, "--config", cfg, "--netns", node.name, "--json")
        assert res.code == 2, (cmd, res.out, res.err)
        assert json.loads(res.out)["error"]["field"] == field
    assert node.ip("-j", "-d", "link", "show", "va").stdout == before


def test_each_namespace_is_independent(netns_factory: NetnsFactory, tmp_path: Path) -> None:
    a, b = netns_factory(), netns_factory()
    for ns in (a, b):
        ns.ip("link", "add", "va", "type", "veth", "peer", "name", "vb")
    cfg = write_config(tmp_path, '[[interfaces]]\nname = "va"\nmtu = 4000\n[qos]\nprofile = "none"\n')
    assert nodeos("net", "apply", "--config", str(cfg), "--netns", a.name, "--yes").code == 0
    assert json.loads(a.ip("-j", "link", "show", "va").stdout)[0]["mtu"] == 4000
    assert json.loads(b.ip("-j", "link", "show", "va").stdout)[0]["mtu"] == 1500


def _sniff_syn_tos(peer: Netns, port: int, ready: threading.Event, out: dict[str, int]) -> None:
    def work() -> None:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        s.bind(("vb", 0))
        s.settimeout(10)
        ready.set()
        try:
            while True:
                frame = s.recv(2048)
                ip = frame[14:]
                ihl = (ip[0] & 0x0F) * 4
                if ip[9] == socket.IPPROTO_TCP and struct.unpack_from("!H", ip, ihl + 2)[0] == port:
                    out["tos"] = ip[1]
                    return
        except TimeoutError:
            return
        finally:
            s.close()

    run_in(peer.name, work)


def test_storage_traffic_leaves_with_the_profile_dscp(pair: tuple[Netns, Netns], tmp_path: Path) -> None:
    """What a switch sees: NVMe/TCP segments (port 4420) carry DSCP 10; others are unmarked."""
    node, peer = pair
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (Debian nftables; images/bootstrap.sh installs it)")
    cc = allowed_cc(node)
    text = f'[[interfaces]]\nname = "va"\n[qos]\nprofile = "tcp-dctcp"\ncongestion_control = "{cc}"\n'
    text += 'qdisc = "mq"\nmtu = 1500\n'
    cfg = write_config(tmp_path, text)
    res = nodeos("net", "apply", "--config", str(cfg), "--netns", node.name, "--yes", "--json")
    assert res.code == 0, res.err
    assert any(c["kind"] == "dscp_mark" for c in json.loads(res.out)["applied"])
    for port, dscp in ((4420, 10), (8080, 0)):
        ready, got = threading.Event(), {}
        t = threading.Thread(target=_sniff_syn_tos, args=(peer, port, ready, got))
        t.start()
        assert ready.wait(10)

        def connect(p: int = port) -> None:
            with socket.socket() as c:
                c.settimeout(2)
                with contextlib.suppress(OSError):
                    c.connect(("10.0.0.2", p))

        run_in(node.name, connect)
        t.join()
        assert got.get("tos", -1) >> 2 == dscp, (port, got)
    assert nodeos("net", "verify", "--config", str(cfg), "--netns", node.name).code == 0
    node.exec("nft", "delete", "table", "inet", "nodeos_qos")
    drift = nodeos("net", "verify", "--config", str(cfg), "--netns", node.name, "--json")
    assert (
        drift.code == 3 and json.loads(drift.out)["drift"][0]["item"] == "nftables inet nodeos_qos dscp_mark"
    )
