"""NVMe/TCP TLS on the SPDK data plane against a REAL nvmf_tgt (marker `spdk`), on loopback.

The export's TLS listener (the TLS port, nodeos/tlskey.py) is made with `secure_channel`; a
granted host's PSK goes into SPDK's keyring and onto the subsystem's host. The host side is SPDK's
own initiator: a second SPDK app attaching the subsystem with `bdev_nvme_attach_controller`
(`psk`: a key in that app's keyring), as SPDK's docs show for TLS. Skipped with the reason where
SPDK is absent (tests/spdk/conftest.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeos import tlskey
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener
from nodeos.dataplane.spdk import client
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.errors import NodeosError
from nodeos.validate import make_dhchap_secret
from tests.spdk.conftest import SpdkTarget, spdk_dir, start_target, stop_target

pytestmark = pytest.mark.spdk

MIB = 1024 * 1024
# A loopback address of its own: the TLS port is fixed (4421), and other SPDK tests use 127.0.0.1.
ADDR = "127.0.0.28"
H1 = "nqn.2014-08.org.nvmexpress:uuid:28282828-1111-4111-8111-111111111111"
H2 = "nqn.2014-08.org.nvmexpress:uuid:28282828-2222-4222-8222-222222222222"
UUID = "28e0f0a0-2c1d-4e8f-9a3b-7c6d5e4f3a28"
NQN = f"nqn.2014-08.io.nodeos:vol:{UUID}"
K1 = tlskey.make_key(bytes(range(32)))
K2 = tlskey.make_key(bytes(range(1, 33)))  # another host's key: the wrong one for H1


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SpdkTarget, SpdkTarget]]:
    """The storage target (pool, volume) and a second SPDK app as the host's initiator."""
    bin_dir = spdk_dir()
    if os.geteuid() != 0:
        pytest.skip("SPDK's nvmf_tgt needs root")
    work = tmp_path_factory.mktemp("spdk-tls")
    target = start_target(bin_dir, work / "target", discovery_svcid=None)
    host = None
    try:
        # bdev_nvme over TCP needs a polling app (SPDK refuses interrupt mode for it)
        host = start_target(bin_dir, work / "host", nice=19, discovery_svcid=None)
        f = work / "drive.img"
        with open(f, "wb") as fh:
            fh.truncate(128 * MIB)
        target.dp.create_pool("p", [target.dp.create_aio_drive_for_tests("AIOtls", str(f))])
        target.dp.create_volume("p", "v1", 16 * MIB)
        for name, key in (("k1", K1), ("k2", K2)):
            path = work / f"{name}.key"
            path.write_text(key)
            path.chmod(0o600)  # SPDK's keyring refuses a key file others may read
            host.dp.call(("keyring_file_add_key", {"name": name, "path": str(path)}))
        yield target, host
    finally:
        if host is not None:
            stop_target(host, signal.SIGKILL)
        stop_target(target, signal.SIGKILL)


def _spec(hosts: tuple[HostAccess, ...], listeners: tuple[Listener, ...]) -> ExportSpec:
    return ExportSpec(
        nqn=NQN,
        serial="NODEOSTLS1",
        pool_id="p",
        vol_id="v1",
        uuid=UUID,
        nguid=UUID.replace("-", ""),
        listeners=listeners,
        hosts=hosts,
    )


TLS = Listener("tcp", ADDR, tlskey.TLS_SVCID)


def _attach(
    host: SpdkTarget, hostnqn: str, psk: str | None, port: str = tlskey.TLS_SVCID, dhchap: str | None = None
) -> str | None:
    """Connect as `hostnqn` (with keyring keys `psk`, `dhchap`); None if it connected (then
    detached), else SPDK's refusal."""
    params: dict[str, Any] = {
        "name": "T",
        "trtype": "TCP",
        "adrfam": "IPv4",
        "traddr": ADDR,
        "trsvcid": port,
        "subnqn": NQN,
        "hostnqn": hostnqn,
        "fabrics_connect_timeout_us": 5_000_000,
    }
    if psk:
        params["psk"] = psk
    if dhchap:
        params["dhchap_key"] = dhchap
    try:
        host.dp.call(("bdev_nvme_attach_controller", params), timeout=60)
    except NodeosError as err:
        return err.message
    bdevs = host.dp.call(("bdev_get_bdevs", {}))
    host.dp.call(("bdev_nvme_detach_controller", {"name": "T"}))
    assert any(b["name"] == "Tn1" for b in bdevs), bdevs
    return None


def test_tls_listener_lets_the_right_key_in_and_refuses_the_rest(pair: tuple[SpdkTarget, SpdkTarget]) -> None:
    target, host = pair
    target.dp.apply_export(_spec((HostAccess(H1, tls_key=K1), HostAccess(H2)), (TLS,)))
    (lst,) = target.dp.call(("nvmf_subsystem_get_listeners", {"nqn": NQN}))
    assert lst["address"]["trsvcid"] == tlskey.TLS_SVCID
    assert _attach(host, H1, "k1") is None  # TLS with its key: connected, namespace there
    assert _attach(host, H1, None) is not None  # plain text to the TLS port: refused
    assert _attach(host, H1, "k2") is not None  # a wrong key: refused
    assert _attach(host, H2, "k1") is not None  # a host without a key on the target: refused
    assert _attach(host, H2, None) is not None


def test_a_changed_key_replaces_the_old_one_and_a_restart_keeps_it(
    pair: tuple[SpdkTarget, SpdkTarget], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, host = pair
    spec = _spec((HostAccess(H1, tls_key=K2),), (TLS,))
    target.dp.apply_export(spec)
    assert _attach(host, H1, "k2") is None
    assert _attach(host, H1, "k1") is not None  # the old key no longer opens it
    # A daemon restart (a new data plane object and connection): the PSK is read back from
    # SPDK's config, so re-applying the same export changes nothing (no host removed and added:
    # that would drop its connections).
    sent: list[str] = []
    send = client._Connection.send
    monkeypatch.setattr(
        client._Connection,
        "send",
        lambda self, method, params=None: sent.append(method) or send(self, method, params),
    )
    fresh = SpdkDataPlane(str(target.sock), keys_dir=target.workdir / "keys", discovery_svcid=None)
    try:
        fresh.apply_export(spec)
        fresh.reapply_exports([spec])
    finally:
        fresh.close()
    assert "nvmf_subsystem_add_host" not in sent and "nvmf_subsystem_remove_host" not in sent, sent
    assert _attach(host, H1, "k2") is None


def test_plain_and_tls_listeners_side_by_side(pair: tuple[SpdkTarget, SpdkTarget], tmp_path: Path) -> None:
    """Policy `allowed`: the volume listens in plain text and over TLS; a host with a key may
    use either, its key still opens only the TLS port."""
    target, host = pair
    plain = Listener("tcp", ADDR, "4420")
    target.dp.apply_export(_spec((HostAccess(H1, tls_key=K1),), (plain, TLS)))
    assert _attach(host, H1, "k1") is None
    assert _attach(host, H1, None, port="4420") is None
    # required again: the plain listener goes, and with it plain text
    target.dp.apply_export(_spec((HostAccess(H1, tls_key=K1),), (TLS,)))
    assert _attach(host, H1, None, port="4420") is not None
    assert _attach(host, H1, "k1") is None


def test_tls_together_with_dh_hmac_chap(pair: tuple[SpdkTarget, SpdkTarget], tmp_path: Path) -> None:
    """A host with both: TLS and then in-band authentication on the secure channel. SPDK's docs
    (doc/nvmf.md) still say authentication is not done on a secure channel; v26.05 does it: the
    host needs both keys (its PSK alone is refused)."""
    target, host = pair
    secret = make_dhchap_secret(b"d" * 32, 1)
    path = tmp_path / "dh.key"
    path.write_text(secret)
    path.chmod(0o600)
    host.dp.call(("keyring_file_add_key", {"name": "dh1", "path": str(path)}))
    target.dp.apply_export(_spec((HostAccess(H1, dhchap_key=secret, tls_key=K1),), (TLS,)))
    assert _attach(host, H1, "k1", dhchap="dh1") is None
    assert _attach(host, H1, "k1") is not None  # TLS without authentication: refused
    assert _attach(host, H1, None, dhchap="dh1") is not None  # authentication without TLS: refused


def test_an_export_removed_and_made_again_keeps_tls(pair: tuple[SpdkTarget, SpdkTarget]) -> None:
    """A subsystem deleted and made again (a volume re-exported after a move): SPDK drops the
    hosts' PSKs with it, so the same host's PSK is accepted again and works."""
    target, host = pair
    spec = _spec((HostAccess(H1, tls_key=K1),), (TLS,))
    target.dp.apply_export(spec)
    target.dp.remove_export(NQN)
    target.dp.apply_export(spec)
    assert _attach(host, H1, "k1") is None
