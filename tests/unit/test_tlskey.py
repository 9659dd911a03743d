"""NVMe TLS PSK interchange format and the TLS policy (nodeos/tlskey.py), and how an export's
listeners and hosts follow them (nodeos/node/model.py)."""

from __future__ import annotations

import base64
import zlib

import pytest

from nodeos import tlskey
from nodeos.dataplane.base import HostAccess, Listener, is_tls
from nodeos.errors import BadInput, OperationFailed
from nodeos.node import model

# SPDK's own example (doc/nvmf.md, "Enabling NVMe-oF TLS"): the ASCII key below, hash 01.
SPDK_DOC_KEY = "NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:"


def test_the_format_matches_what_spdk_documents() -> None:
    assert tlskey.make_key(b"00112233445566778899aabbccddeeff", 1) == SPDK_DOC_KEY
    assert tlskey.check_key(SPDK_DOC_KEY) == SPDK_DOC_KEY


def test_generated_keys_are_valid_and_new_each_time() -> None:
    a, b = tlskey.generate(), tlskey.generate()
    assert a != b and a.startswith("NVMeTLSkey-1:01:")
    assert tlskey.check_key(a) == a and tlskey.check_key(tlskey.generate(2)).startswith("NVMeTLSkey-1:02:")
    assert tlskey.check_key(tlskey.make_key(b"x" * 48, 0))  # hash 00 takes 32 or 48 bytes


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


KEY32 = b"k" * 32
GOOD_BODY = _b64(KEY32 + zlib.crc32(KEY32).to_bytes(4, "little"))
BAD = [
    "",
    "secret",
    f"NVMeTLSkey-2:01:{GOOD_BODY}:",  # another version
    f"NVMeTLSkey-1:03:{GOOD_BODY}:",  # no hash 03
    f"NVMeTLSkey-1:01:{GOOD_BODY}",  # no closing colon
    f"NVMeTLSkey-1:02:{GOOD_BODY}:",  # SHA-384 needs 48 bytes
    f"NVMeTLSkey-1:01:{_b64(KEY32 + b'xxxx')}:",  # CRC-32 wrong
    f"NVMeTLSkey-1:01:{_b64(b'k' * 20 + zlib.crc32(b'k' * 20).to_bytes(4, 'little'))}:",
    "NVMeTLSkey-1:01:!!!!:",
    "DHHC-1:01:" + GOOD_BODY + ":",  # a DH-HMAC-CHAP secret is not a TLS key
    f" NVMeTLSkey-1:01:{GOOD_BODY}:",
]


@pytest.mark.parametrize("value", BAD)
def test_a_bad_key_is_refused_naming_the_field_never_echoing_it(value: str) -> None:
    with pytest.raises(BadInput) as ei:
        tlskey.check_key(value, "tls_key_file")
    assert ei.value.field == "tls_key_file" and "NVMeTLSkey-1" in str(ei.value.allowed)
    if len(value) > 12:
        assert value not in ei.value.message


def test_a_key_that_is_no_string_is_refused() -> None:
    with pytest.raises(BadInput):
        tlskey.check_key(123)
    assert tlskey.check_key(None) is None


def test_policies() -> None:
    assert tlskey.check_policy("allowed") == "allowed"
    with pytest.raises(BadInput) as ei:
        tlskey.check_policy("yes")
    assert ei.value.field == "tls" and ei.value.allowed == ["required", "allowed", "off"]
    assert tlskey.host_policy(None) == "off" and tlskey.host_policy({"nqn": "h"}) == "off"
    assert tlskey.host_policy({"tls": "???"}) == "required"  # an unknown word never weakens a host


HOSTS = {
    "req": {"tls": "required", "tls_key": "K1"},
    "ok": {"tls": "allowed", "tls_key": "K2"},
    "plain": {"nqn": "plain"},
}


def test_a_volume_follows_the_strictest_of_its_hosts() -> None:
    assert tlskey.volume_policy([], HOSTS) == "off"
    assert tlskey.volume_policy(["plain"], HOSTS) == "off"
    assert tlskey.volume_policy(["plain", "ok"], HOSTS) == "allowed"
    assert tlskey.volume_policy(["ok", "req"], HOSTS) == "required"


def test_a_host_without_a_key_cannot_share_a_tls_only_volume() -> None:
    assert tlskey.grant_conflicts(["req", "ok"], HOSTS) is None
    assert tlskey.grant_conflicts(["plain", "ok"], HOSTS) is None
    why = tlskey.grant_conflicts(["req", "plain"], HOSTS)
    assert why and "req" in why and "plain" in why


TCP = Listener("tcp", "10.0.0.1", "4420")
RDMA = Listener("rdma", "10.0.0.1", "4420")


def test_listeners_per_policy() -> None:
    tls = Listener("tcp", "10.0.0.1", tlskey.TLS_SVCID)
    assert is_tls(tls) and not is_tls(TCP) and not is_tls(Listener("rdma", "10.0.0.1", tlskey.TLS_SVCID))
    assert model.tls_listeners((TCP, RDMA), "off") == (TCP, RDMA)
    assert model.tls_listeners((TCP, RDMA), "allowed") == (TCP, RDMA, tls)
    assert model.tls_listeners((TCP, RDMA), "required") == (tls,)  # no plain text, no RDMA
    assert model.tls_listeners((RDMA,), "required") == ()


def _vol(hosts: list[str]) -> dict[str, object]:
    return {
        "nqn": "nqn.2014-08.io.nodeos:vol:u",
        "serial": "S1",
        "pool_id": "p",
        "vol_id": "v",
        "uuid": "5b0e6f0a-2c1d-4e8f-9a3b-7c6d5e4f3a21",
        "nguid": "5b0e6f0a2c1d4e8f9a3b7c6d5e4f3a21",
        "hosts": hosts,
    }


def test_export_spec_carries_keys_and_the_volume_policy() -> None:
    spec = model.export_spec(_vol(["req", "ok"]), (TCP, RDMA), HOSTS)
    assert spec.listeners == (Listener("tcp", "10.0.0.1", tlskey.TLS_SVCID),)
    assert spec.hosts == (HostAccess("req", None, "K1"), HostAccess("ok", None, "K2"))
    spec = model.export_spec(_vol(["plain"]), (TCP, RDMA), HOSTS)
    assert spec.listeners == (TCP, RDMA) and spec.hosts == (HostAccess("plain"),)
    # a key that did not open on this node stops the export: never TLS without the key
    with pytest.raises(OperationFailed) as ei:
        model.export_spec(
            _vol(["req"]), (TCP,), {"req": {"tls": "required", "tls_error": "sealed elsewhere"}}
        )
    assert ei.value.field == "tls_key"


def test_every_replica_node_exports_the_same_tls_listeners() -> None:
    """A replicated volume's primary and secondaries (and a fenced primary) offer a host the same
    ports: a failover never turns a TLS-only volume into a plain-text one."""
    seen = set()
    for role, slot, fenced in (("primary", 0, False), ("secondary", 1, False), ("primary", 0, True)):
        vol = {**_vol(["req", "ok"]), "replicas": 2, "role": role, "slot": slot, "device": "/dev/md/x"}
        spec = model.export_spec(vol, (Listener("tcp", f"10.0.0.{slot + 1}", "4420"),), HOSTS, fenced)
        assert [(li.trtype, li.trsvcid) for li in spec.listeners] == [("tcp", tlskey.TLS_SVCID)]
        assert {h.tls_key for h in spec.hosts} == {"K1", "K2"}
        seen.add(spec.ana_state)
    assert seen == {"optimized", "inaccessible"}
