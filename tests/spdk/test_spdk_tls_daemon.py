"""NVMe/TCP TLS as the operator uses it (marker `spdk`, issue 28): a REAL nodeosd on a REAL
nvmf_tgt, driven through the `nodeos` console; the host is SPDK's own initiator (a second SPDK
app, `bdev_nvme_attach_controller` with the key the appliance made and showed once).

Checked: a host added with `--tls` gets a key; its volume listens on the TLS port only (no plain
TCP); the host connects with its key and is refused without it or in plain text; a host without
a key cannot be granted that volume (exit 2, nothing changed); `host update --tls allowed` adds
the plain listener back.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos import tlskey
from nodeos.errors import NodeosError

from .conftest import SpdkTarget, need_root, spdk_dir, start_target, stop_target
from .test_spdk_cluster import Node, _storage_target

pytestmark = [pytest.mark.spdk, pytest.mark.timeout(600)]
ADDR = "127.0.0.29"  # the node's storage address (the TLS port is fixed: an address of its own)
H1 = "nqn.2014-08.com.example:tls-gpu-1"
H2 = "nqn.2014-08.com.example:tls-gpu-2"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, SpdkTarget, Path]]:
    bin_dir = spdk_dir()
    need_root()
    work = tmp_path_factory.mktemp("spdk-tls-daemon")
    node = host = None
    try:
        node = Node(1, work / "n1", _storage_target(bin_dir, work, 1), ADDR, drive="AIO1")
        node.root.mkdir(parents=True)
        node.start()
        node.ok("cluster", "init", "--node-id", "1")
        node.ok("pool", "create", "p1", "--drives", node.drive, "--node", "n1")
        host = start_target(bin_dir, work / "host", nice=19, discovery_svcid=None)
        yield node, host, work
    finally:
        if node is not None:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait(timeout=30)
            stop_target(node.target, signal.SIGKILL)
        if host is not None:
            stop_target(host, signal.SIGKILL)


def _attach(host: SpdkTarget, nqn: str, hostnqn: str, port: str, psk: str | None) -> str | None:
    params: dict[str, Any] = {
        "name": "T",
        "trtype": "TCP",
        "adrfam": "IPv4",
        "traddr": ADDR,
        "trsvcid": port,
        "subnqn": nqn,
        "hostnqn": hostnqn,
        "fabrics_connect_timeout_us": 5_000_000,
    }
    if psk:
        params["psk"] = psk
    try:
        host.dp.call(("bdev_nvme_attach_controller", params), timeout=60)
    except NodeosError as err:
        return err.message
    host.dp.call(("bdev_nvme_detach_controller", {"name": "T"}))
    return None


def _ports(vol: dict[str, Any]) -> set[str]:
    return {str(li["trsvcid"]) for li in vol["listeners"] if li["trtype"] == "tcp"}


def test_a_tls_host_reaches_its_volume_with_its_key_only(setup: tuple[Node, SpdkTarget, Path]) -> None:
    node, host, work = setup
    made = node.ok("host", "add", H1, "--tls")
    key = made["tls_key"]
    assert made["tls"] == "required" and tlskey.check_key(key) == key
    assert "tls_key" not in json.dumps(node.ok("host", "list"))  # shown once
    key_file = work / "h1.key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    host.dp.call(("keyring_file_add_key", {"name": "h1", "path": str(key_file)}))

    node.ok("volume", "create", "v1", "--size", "16MiB", "--timeout", "90")
    node.ok("volume", "grant", "v1", "--host", H1)
    vol = node.ok("volume", "show", "v1")
    assert _ports(vol) == {tlskey.TLS_SVCID}  # TLS only: no plain TCP listener
    nqn = vol["nqn"]
    assert _attach(host, nqn, H1, tlskey.TLS_SVCID, "h1") is None
    assert _attach(host, nqn, H1, tlskey.TLS_SVCID, None) is not None  # plain text to the TLS port
    assert _attach(host, nqn, H1, "4420", None) is not None  # no plain listener at all

    # A host without a key cannot share the TLS-only volume: bad input, nothing changed.
    node.ok("host", "add", H2)
    rc, out = node.run("volume", "grant", "v1", "--host", H2)
    assert rc == 2 and out["error"]["field"] == "host", out
    assert node.ok("volume", "show", "v1")["hosts"] == [H1]

    # allowed: plain text too (the plain listener comes back on every replica node)
    assert node.ok("host", "update", H1, "--tls", "allowed")["changed"] is True
    node.ok("volume", "grant", "v1", "--host", H2)  # now both may share it
    vol = node.ok("volume", "show", "v1")
    assert _ports(vol) == {"4420", tlskey.TLS_SVCID}
    assert _attach(host, nqn, H1, "4420", None) is None
    assert _attach(host, nqn, H1, tlskey.TLS_SVCID, "h1") is None
    assert _attach(host, nqn, H2, tlskey.TLS_SVCID, "h1") is not None  # H1's key is not H2's
    node.ok("volume", "revoke", "v1", "--host", H1, "--host", H2)
    node.ok("volume", "delete", "v1")
