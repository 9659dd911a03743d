"""The host fabric as a stock Linux GPU node meets it (issue 28): each storage node's discovery
controller found over mDNS on the lab network, and NVMe/TCP TLS end to end on the kernel target
with the host's own kernel, nvme-cli and tlshd (docs/operations.md, "TLS on NVMe/TCP").
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodeos_devtools.lab import Lab
from tests.lab.node_helpers import nodeos, ok, wait_daemon

pytestmark = pytest.mark.lab
LAB = "cluster3"
STORAGE = ("s1", "s2", "s3")
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"
CONNECT_OPTS = ("--keep-alive-tmo=5", "--ctrl-loss-tmo=60", "--reconnect-delay=2")

# A real mDNS browser on the GPU node (python3-zeroconf, in the image): every service of the
# type it hears within the window, resolved, as JSON.
BROWSE = """
import json, sys, time
from zeroconf import ServiceBrowser, ServiceListener, Zeroconf
found = {}
class L(ServiceListener):
    def add_service(self, zc, type_, name):
        info = zc.get_service_info(type_, name, timeout=5000)
        if info:
            txt = {k.decode(): (v or b"").decode() for k, v in info.properties.items()}
            found[name] = {"addresses": info.parsed_addresses(), "port": info.port, "txt": txt}
    update_service = add_service
    def remove_service(self, zc, type_, name):
        found.pop(name, None)
zc = Zeroconf()
ServiceBrowser(zc, "_nvme-disc._tcp.local.", L())
time.sleep(float(sys.argv[1]))
print(json.dumps(found))
zc.close()
"""


def _browse(lab: Lab, seconds: float = 20) -> dict[str, Any]:
    r = lab.exec("h1", ["python3", "-c", BROWSE, str(seconds)], timeout=seconds + 120)
    assert r.rc == 0, r.stderr[-2000:]
    return dict(json.loads(r.stdout))


def _tcp_adverts(found: dict[str, Any], addr: str) -> list[dict[str, Any]]:
    return [s for s in found.values() if addr in s["addresses"] and s["txt"].get("p") == "tcp"]


def _insert_key(lab: Lab, host: str, nqn: str, key: str, *opts: str) -> None:
    """The TLS key into h1's .nvme keyring for (host, nqn), as docs/operations.md says (read from
    stdin: never on a command line)."""
    lab.exec(
        "h1",
        [
            "sh",
            "-ec",
            f'KEY=$(cat); nvme check-tls-key --keydata="$KEY" --hostnqn={host} --subsysnqn={nqn} '
            f"{' '.join(opts)} --insert",
        ],
        120,
        input=key,
        check=True,
    )


def _node(vol: dict[str, Any]) -> str:
    return str(vol.get("primary") or vol["replicas"][0]["node"])


@pytest.fixture(scope="module")
def volume(lab: Lab) -> Iterator[dict[str, Any]]:
    """A 1-replica volume, its host registered with TLS required and granted (the host's key in
    `tls_key`); everything removed at the end (the shared lab's contract)."""
    for vm in STORAGE:
        wait_daemon(lab, vm)
        ok(lab, vm, "pool", "create", "p", "--drives", "all")
    host = lab.spec("h1").hostnqn
    made: dict[str, Any] = {}
    try:
        # h1 runs Debian 13's nvme-cli 2.13, which derives the TLS PSK the older way.
        added = ok(lab, "s1", "host", "add", host, "--tls", "--tls-derivation", "compat")
        assert added["tls_derivation"] == "compat", added
        made["host"] = host
        vol = ok(lab, "s1", "volume", "create", "tlsv", "--size", "64MiB")
        made["vol"] = vol
        ok(lab, "s1", "volume", "grant", "tlsv", "--host", host)
        # A plain volume granted to no one: its node keeps a plain discovery controller.
        made["plain"] = ok(lab, "s1", "volume", "create", "plainv", "--size", "32MiB")
        yield {**vol, "host": host, "tls_key": added["tls_key"], "plain": made["plain"]}
    finally:
        if "plain" in made:
            nodeos(lab, "s1", "volume", "delete", "plainv", "--force")
        if "vol" in made:
            lab.sh("h1", f"nvme disconnect -n {made['vol']['nqn']} || true", timeout=120)
            nodeos(lab, "s1", "volume", "delete", "tlsv", "--force")
        if "host" in made:
            nodeos(lab, "s1", "host", "remove", host)
        lab.sh("h1", "keyctl clear %:.nvme 2>/dev/null || true", check=False)
        for vm in STORAGE:
            nodeos(lab, vm, "pool", "delete", "p")


def test_the_gpu_node_finds_every_storage_node_over_mdns_and_each_answers_discovery(
    lab: Lab, volume: dict[str, Any]
) -> None:
    """Every storage node, exporting or not: one that exports nothing keeps its discovery port
    anchored (nodeos/dataplane/kernel/nvmet.py, ANCHOR_NQN) and refers the host to the others;
    the anchor itself is in no host's log. Before, such a node refused the connection, and a
    host's persistent discovery controller to it was lost."""
    exporting = _node(volume["plain"])
    deadline = time.monotonic() + 120
    while True:
        found = _browse(lab)
        tcp = {vm: _tcp_adverts(found, lab.addr(vm)) for vm in STORAGE}
        if all(tcp.values()) or time.monotonic() > deadline:
            break
    missing = [vm for vm, adverts in tcp.items() if not adverts]
    assert not missing, (
        f"no _nvme-disc._tcp service of {missing} (the plain volume is on {exporting}): {found}"
    )
    for vm, adverts in tcp.items():
        assert all(s["port"] == 8009 and s["txt"].get("nqn") == DISCOVERY_NQN for s in adverts), adverts
        # What it advertises is a discovery controller that answers the host: with the plain
        # volume where it is exported, a referral to the others everywhere, never the anchor.
        argv = ["nvme", "discover", "-t", "tcp", "-a", lab.addr(vm), "-s", "8009", "-o", "json"]
        r = lab.exec("h1", argv, 60)
        assert r.rc == 0, f"{vm}: {r.stdout}{r.stderr}"
        recs = json.loads(r.stdout).get("records", [])
        assert not any("discovery-anchor" in str(e.get("subnqn")) for e in recs), recs
        referred = {e["traddr"] for e in recs if "referral" in str(e.get("subtype"))}
        assert referred >= {lab.addr(o) for o in STORAGE if o != vm}, f"{vm} refers to {referred}: {recs}"


# Before the per-host derivation (2026-11-30) this timed out in the handshake: Debian 13's nvme-cli
# inserts the PSK in libnvme's compat derivation, nodeos derived only the standard one
# (docs/dataplane.md, "Kernel backend").
def test_tls_required_a_plain_connect_is_refused_and_the_key_connects_and_carries_data(
    lab: Lab, volume: dict[str, Any]
) -> None:
    node, nqn, host = _node(volume), volume["nqn"], volume["host"]
    addr = lab.addr(node)
    # The storage node: tlshd runs (nvmet hands it the handshake) and the TLS port requires it.
    assert lab.exec(node, ["systemctl", "is-active", "tlshd"]).stdout.strip() == "active"
    # Not in the plain discovery log (if the node keeps one: a node whose only exports are TLS
    # only has none): on the kernel target a subsystem linked to the 8009 port can be connected
    # there too, so a TLS-only volume is never linked to it.
    r = lab.exec("h1", ["nvme", "discover", "-t", "tcp", "-a", addr, "-s", "8009", "-o", "json"], 60)
    assert r.rc != 0 or nqn not in r.stdout, r.stdout
    # Plain text: refused on the plain port, the discovery port and the TLS port.
    for port in ("4420", "8009", "4421"):
        r = lab.exec(
            "h1", ["nvme", "connect", "-t", "tcp", "-a", addr, "-s", port, "-n", nqn, *CONNECT_OPTS], 180
        )
        assert r.rc != 0, f"plain-text connect on {port} accepted: {r.stdout}"
        assert nqn not in lab.sh("h1", "cat /sys/class/nvme-subsystem/*/subsysnqn 2>/dev/null || true").stdout
    # The host as docs/operations.md tells an operator: tlshd, the key into .nvme, --tls.
    lab.sh("h1", "systemctl start tlshd && systemctl is-active tlshd", timeout=120)
    # A wrong key (another one of the same kind, for the same host and volume): the handshake
    # fails, the connect is refused and no namespace appears.
    hmac = int(volume["tls_key"].split(":")[1])
    wrong = lab.exec("h1", ["nvme", "gen-tls-key", f"--hmac={hmac}"], 60, check=True).stdout.strip()
    assert wrong.startswith("NVMeTLSkey-1:") and wrong != volume["tls_key"], wrong
    _insert_key(lab, host, nqn, wrong)
    r = lab.exec(
        "h1",
        ["nvme", "connect", "-t", "tcp", "-a", addr, "-s", "4421", "-n", nqn, "--tls", *CONNECT_OPTS],
        180,
    )
    assert r.rc != 0, f"a wrong TLS key connected: {r.stdout}"
    assert nqn not in lab.sh("h1", "cat /sys/class/nvme-subsystem/*/subsysnqn 2>/dev/null || true").stdout
    lab.sh("h1", "keyctl clear %:.nvme", timeout=60)
    _insert_key(lab, host, nqn, volume["tls_key"])
    r = lab.exec(
        "h1",
        ["nvme", "connect", "-t", "tcp", "-a", addr, "-s", "4421", "-n", nqn, "--tls", *CONNECT_OPTS],
        180,
    )
    assert r.rc == 0, r.stdout + r.stderr
    dev = ""
    deadline = time.monotonic() + 120
    while not dev and time.monotonic() < deadline:
        dev = lab.sh(
            "h1",
            f'for s in /sys/class/nvme-subsystem/*; do [ "$(cat $s/subsysnqn)" = {nqn} ] && ls $s | '
            "grep -m1 '^nvme[0-9]*n[0-9]*$' || true; done",
        ).stdout.strip()
        time.sleep(2)
    assert dev, "no namespace on the host after a TLS connect"
    # Data through TLS: 8 MiB written with O_DIRECT and read back the same.
    out = lab.sh(
        "h1",
        f"head -c 8M /dev/urandom > /root/tls.pat && dd if=/root/tls.pat of=/dev/{dev} bs=1M oflag=direct "
        f"conv=fsync status=none && dd if=/dev/{dev} bs=1M count=8 iflag=direct status=none | sha256sum && "
        "sha256sum < /root/tls.pat",
        timeout=300,
    ).stdout.split()
    assert out[0] == out[2], out
    lab.sh("h1", f"nvme disconnect -n {nqn}", timeout=120)
    # The same key inserted under identity version 1 (`--identity=1`, as some vendors' guides
    # say): the node holds that name too, so the host connects again with it alone.
    lab.sh("h1", "keyctl clear %:.nvme", timeout=60)
    _insert_key(lab, host, nqn, volume["tls_key"], "--identity=1")
    assert "NVMe1R01" in lab.sh("h1", "cat /proc/keys").stdout
    r = lab.exec(
        "h1",
        ["nvme", "connect", "-t", "tcp", "-a", addr, "-s", "4421", "-n", nqn, "--tls", *CONNECT_OPTS],
        180,
    )
    assert r.rc == 0, r.stdout + r.stderr
    lab.sh("h1", f"nvme disconnect -n {nqn}", timeout=120)
