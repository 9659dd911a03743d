"""TLS on the kernel data plane: the TLS PSK that goes into the .nvme keyring, and the nvmet port
attributes of the TLS port.

The vectors in data/tls_psk_spdk_v26.05.json were printed by SPDK v26.05's own derivation
(nvme_tcp_parse_interchange_psk, nvme_tcp_generate_psk_identity, nvme_tcp_derive_retained_psk,
nvme_tcp_derive_tls_psk in include/spdk_internal/nvme_tcp.h, compiled into a small C program
against a local build): hash 01, 02, and 00 with 32- and 48-byte keys, and SPDK's documented
example key. SPDK's TLS works against Linux hosts, so the same identity and PSK is what a host's
`nvme connect --tls` sends and what tlshd must find in the keyring."""

from __future__ import annotations

import json
from pathlib import Path

from nodeos.dataplane.base import Listener
from nodeos.dataplane.kernel import tlskeys
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.dataplane.kernel.exports import KernelExports
from nodeos.dataplane.kernel.nvmet import Nvmet, PortAddr
from nodeos.tlskey import TLS_SVCID

DATA = Path(__file__).parent / "data" / "tls_psk_spdk_v26.05.json"
H = "nqn.2014-08.org.nvmexpress:uuid:28282828-1111-4111-8111-111111111111"
S = "nqn.2014-08.io.nodeos:vol:28e0f0a0-2c1d-4e8f-9a3b-7c6d5e4f3a28"


def test_the_tls_psk_is_the_one_spdk_derives() -> None:
    vectors = json.loads(DATA.read_text())
    assert len(vectors) == 5
    for v in vectors:
        ident, psk = tlskeys.tls_psk(v["key"], H, S)
        assert (ident, psk.hex()) == (v["identity"], v["tls_psk"]), v["key"][:16]
    # the PSK depends on both NQNs: another host or subsystem gets another key
    k = vectors[0]["key"]
    assert tlskeys.tls_psk(k, H, S)[1] != tlskeys.tls_psk(k, H, S + "x")[1]
    assert tlskeys.tls_psk(k, H, S)[1] != tlskeys.tls_psk(k, H + "x", S)[1]


class DirConfigFs(ConfigFs):
    """configfs as a plain directory: a made port has its attribute files, as the kernel's has."""

    def mkdir(self, *parts: str) -> None:
        super().mkdir(*parts)
        if len(parts) == 2 and parts[0] == "ports":
            for attr in (
                "addr_adrfam",
                "addr_trtype",
                "addr_traddr",
                "addr_trsvcid",
                "addr_tsas",
                "addr_treq",
            ):
                (self.path(*parts) / attr).write_text("")


def _nvmet(tmp_path: Path) -> Nvmet:
    (tmp_path / "ports").mkdir()
    (tmp_path / "subsystems").mkdir()
    return Nvmet(DirConfigFs(tmp_path))


def test_the_tls_port_requires_tls_13_and_the_plain_port_is_untouched(tmp_path: Path) -> None:
    n = _nvmet(tmp_path)
    tls = n.ensure_port(PortAddr.of(Listener("tcp", "10.0.0.1", TLS_SVCID)))
    plain = n.ensure_port(PortAddr.of(Listener("tcp", "10.0.0.1", "4420")))
    assert (tmp_path / "ports" / str(tls) / "addr_tsas").read_text() == "tls1.3"
    assert (tmp_path / "ports" / str(tls) / "addr_treq").read_text() == "required"
    assert (tmp_path / "ports" / str(plain) / "addr_tsas").read_text() == ""
    rdma = n.ensure_port(PortAddr.of(Listener("rdma", "10.0.0.1", TLS_SVCID)))  # RDMA has no TLS
    assert (tmp_path / "ports" / str(rdma) / "addr_tsas").read_text() == ""


class RecordingKeyring(tlskeys.Keyring):
    """The keyring's two calls recorded (this machine's kernel has no .nvme keyring)."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    def put(self, ident: str, payload: bytes) -> None:
        self.keys[ident] = payload

    def drop(self, ident: str) -> None:
        self.keys.pop(ident, None)

    def drop_prefix(self, prefix: str, keep: str | None = None) -> None:
        for ident in [i for i in self.keys if i.startswith(prefix) and i != keep]:
            del self.keys[ident]


def test_a_hosts_key_is_put_per_subsystem_and_dropped_with_tls_off() -> None:
    ex = KernelExports()
    ring = RecordingKeyring()
    ex.keyring = ring
    key = json.loads(DATA.read_text())[0]["key"]
    ex._tls_key(S, H, key)
    # both identities: the host offers version 0 or 1, as its nvme-cli inserted the key
    assert ring.keys == dict(tlskeys.tls_psks(key, H, S))
    assert sorted(i[:8] for i in ring.keys) == ["NVMe0R01", "NVMe1R01"]
    # a new key: the old one's version-1 name (its digest) is gone, not left usable
    other = json.loads(DATA.read_text())[1]["key"]
    ex._tls_key(S, H, other)
    assert ring.keys == dict(tlskeys.tls_psks(other, H, S))
    ex._tls_key(S, H, None)
    assert ring.keys == {}
    # no TLS host yet: the keyring is never opened (a kernel without TLS is left alone)
    bare = KernelExports()
    bare._tls_key(S, H, None)
    assert bare.keyring is None


# libnvme's own test vectors (test/psk.c, "identity" and "identity_compat"): the TLS identity of
# version 1 ends in base64(HMAC(retained key, "<host> <subsystem> NVMe-over-Fabrics")), so it
# names the retained key of each derivation. The configured key is libnvme's test key.
LIBNVME_KEY = bytes.fromhex("5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03")
LIBNVME_DIGESTS = {
    (32, "standard"): "iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=",
    (32, "compat"): "66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM=",
    (48, "standard"): "QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a",
    (48, "compat"): "RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz",
}


def test_both_derivations_make_the_retained_key_libnvme_makes() -> None:
    import base64
    import hashlib
    import hmac

    from nodeos.tlskey import make_key

    host, sub = "nqn.psk-test-host", "nqn.psk-test-subsys"
    for (n, derivation), want in LIBNVME_DIGESTS.items():
        raw = LIBNVME_KEY if n == 32 else LIBNVME_KEY + LIBNVME_KEY[16:]
        key = make_key(raw, 1 if n == 32 else 2)
        retained = tlskeys.retained_key(key, host, derivation)  # type: ignore[arg-type]
        digest = hmac.new(
            retained, f"{host} {sub} NVMe-over-Fabrics".encode(), getattr(hashlib, f"sha{n * 8}")
        )
        assert base64.b64encode(digest.digest()).decode() == want, (n, derivation)
    # the two forms differ in the TLS PSK too (the second step has the same info layout), and the
    # identity tlshd looks up is the same for both: only the key under it changes
    key = json.loads(DATA.read_text())[0]["key"]
    std, compat = tlskeys.tls_psk(key, H, S), tlskeys.tls_psk(key, H, S, "compat")
    assert std[0] == compat[0] and std[1] != compat[1]


def test_a_compat_hosts_key_goes_into_the_keyring_in_the_compat_form() -> None:
    ex = KernelExports()
    ring = RecordingKeyring()
    ex.keyring = ring
    key = json.loads(DATA.read_text())[0]["key"]
    ex._tls_key(S, H, key, "compat")
    assert ring.keys == dict(tlskeys.tls_psks(key, H, S, "compat"))
    assert not set(ring.keys.values()) & {p for _, p in tlskeys.tls_psks(key, H, S)}


LIBNVME_IDENTITIES_V1 = {  # the same vectors' whole identities (version 1)
    (32, "standard"): "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys " + LIBNVME_DIGESTS[(32, "standard")],
    (32, "compat"): "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys " + LIBNVME_DIGESTS[(32, "compat")],
    (48, "standard"): "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys " + LIBNVME_DIGESTS[(48, "standard")],
    (48, "compat"): "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys " + LIBNVME_DIGESTS[(48, "compat")],
}


def test_the_version_1_identity_is_libnvmes() -> None:
    from nodeos.tlskey import make_key

    for (n, derivation), want in LIBNVME_IDENTITIES_V1.items():
        raw = LIBNVME_KEY if n == 32 else LIBNVME_KEY + LIBNVME_KEY[16:]
        key = make_key(raw, 1 if n == 32 else 2)
        ident, psk = tlskeys.tls_psk_v1(key, "nqn.psk-test-host", "nqn.psk-test-subsys", derivation)  # type: ignore[arg-type]
        assert ident == want and len(psk) == n
    key = json.loads(DATA.read_text())[0]["key"]
    assert tlskeys.tls_psk_v1(key, H, S)[1] != tlskeys.tls_psk(key, H, S)[1]  # another context


def test_psk_keys_are_read_from_proc_keys() -> None:
    text = (
        "1a2b3c4d I--Q---     1 perm 3f010000     0     0 keyring   .nvme: 2\n"
        f"00000abc I--Q---     1 perm 3f010000     0     0 psk       NVMe0R01 {H} {S}: 32\n"
        f"00000abd I--Q---     1 perm 3f010000     0     0 psk       NVMe1R01 {H} {S} AbC+/=: 32\n"
        "00000abe I--Q---     1 perm 3f010000     0     0 user      NVMe0R01 x y: 32\n"
    )
    assert tlskeys.psk_keys(text) == [(0xABC, f"NVMe0R01 {H} {S}"), (0xABD, f"NVMe1R01 {H} {S} AbC+/=")]
