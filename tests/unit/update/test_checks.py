"""The pure checks of an update bundle: its layout, the signed manifest's architecture and
version, and the reason a refusal names (nodeos/update/checks.py)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from nodeos.update import checks
from nodeos.update.checks import BundleRefused


def _bundle_bytes(image: int = 5000, pad_to: int = 8192, sig: int = 300) -> bytes:
    """A file shaped as a RAUC plain bundle: squashfs superblock, padding, DER signature, trailer."""
    head = bytearray(b"hsqs" + bytes(92))
    struct.pack_into("<Q", head, 40, image)
    body = bytes(head) + bytes(pad_to - len(head))
    content = sig - 4
    signature = b"\x30\x82" + content.to_bytes(2, "big") + bytes(content)
    return body + signature + struct.pack(">Q", sig)


def _layout_of(data: bytes) -> checks.Layout:
    lay = checks.layout(len(data), data[: checks.HEAD_BYTES], data[-checks.TRAILER_BYTES :])
    checks.check_signature_header(lay, data[lay.payload_end : lay.payload_end + 8])
    return lay


def test_a_whole_bundle_has_its_parts() -> None:
    lay = _layout_of(_bundle_bytes())
    assert (lay.image_bytes, lay.payload_end, lay.signature_bytes) == (5000, 8192, 300)


@pytest.mark.parametrize("cut", [1, 8, 100, 299, 307, 308, 3000, 5000])
def test_a_bundle_cut_anywhere_is_truncated(cut: int) -> None:
    data = _bundle_bytes()[:-cut]
    with pytest.raises(BundleRefused) as e:
        _layout_of(data)
    assert e.value.reason == "truncated"
    assert e.value.exit_code == 2 and e.value.field == "bundle"
    assert e.value.to_dict()["reason"] == "truncated"


def test_a_file_that_is_no_squashfs_is_not_a_bundle() -> None:
    with pytest.raises(BundleRefused) as e:
        _layout_of(b"PK\x03\x04" + bytes(400))
    assert e.value.reason == "not_a_bundle"
    with pytest.raises(BundleRefused) as e:
        _layout_of(b"")
    assert e.value.reason == "not_a_bundle"


def test_der_lengths() -> None:
    assert checks.der_length(b"\x30\x05") == 7
    assert checks.der_length(b"\x30\x81\x90") == 3 + 0x90
    assert checks.der_length(b"\x30\x82\x01\x00") == 4 + 256
    assert checks.der_length(b"\x31\x05") is None
    assert checks.der_length(b"\x30\x80") is None  # indefinite length: not what RAUC writes
    assert checks.der_length(b"\x30") is None


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("0.4.0", "0.4.1"),
        ("0.4.9", "0.5.0"),
        ("0.5.0rc1", "0.5.0"),
        ("0.5.0a2", "0.5.0b1"),
        ("0.5.0.dev3", "0.5.0a1"),
        ("0.5.0", "0.10.0"),
        ("1.0", "1.0.1"),
    ],
)
def test_versions_order(older: str, newer: str) -> None:
    assert checks.version_key(older) < checks.version_key(newer)


def test_versions_equal_and_bad() -> None:
    assert checks.version_key("0.5") == checks.version_key("0.5.0") == checks.version_key("0.5.0+lab1")
    for bad in ("", "v1", "1.x", "latest"):
        with pytest.raises(ValueError):
            checks.version_key(bad)


def _info(**kw: Any) -> dict[str, Any]:
    return {"compatible": "nodeos-amd64", "version": "0.5.0", "build": "abc.123", **kw}


def test_manifest_upgrade_same_and_allowed_downgrade() -> None:
    v = checks.check_manifest(_info(), arch="amd64", running="0.4.0", allow_downgrade=False)
    assert (v.change, v.version, v.build) == ("upgrade", "0.5.0", "abc.123")
    v = checks.check_manifest(_info(), arch="amd64", running="0.5.0", allow_downgrade=False)
    assert v.change == "same"
    v = checks.check_manifest(_info(version="0.3.0"), arch="amd64", running="0.4.0", allow_downgrade=True)
    assert v.change == "downgrade"


def test_manifest_downgrade_refused_without_the_flag() -> None:
    with pytest.raises(BundleRefused) as e:
        checks.check_manifest(_info(version="0.3.0"), arch="amd64", running="0.4.0", allow_downgrade=False)
    assert e.value.reason == "downgrade"
    assert (
        "0.3.0" in e.value.message and "0.4.0" in e.value.message and "--allow-downgrade" in e.value.message
    )


def test_manifest_other_architecture_named() -> None:
    with pytest.raises(BundleRefused) as e:
        checks.check_manifest(
            _info(compatible="nodeos-arm64"), arch="amd64", running="0.4.0", allow_downgrade=True
        )
    assert e.value.reason == "other_architecture"
    assert "arm64" in e.value.message and "amd64" in e.value.message
    with pytest.raises(BundleRefused) as e:
        checks.check_manifest(
            _info(compatible="acme-x86"), arch="amd64", running="0.4.0", allow_downgrade=True
        )
    assert e.value.reason == "other_architecture"


def test_manifest_bad_version() -> None:
    with pytest.raises(BundleRefused) as e:
        checks.check_manifest(_info(version="latest"), arch="amd64", running="0.4.0", allow_downgrade=True)
    assert e.value.reason == "bad_version"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Invalid bundle format: Signature size (1660487941423303937) exceeds bundle size", "truncated"),
        ("signature verification failed: error:1700009E:CMS routines::verification failure", "bad_signature"),
        ("signature verification failed: Verify error: self-signed certificate", "bad_signature"),
        ("Invalid bundle format: something else", "not_a_bundle"),
        ("Failed to open file: No such device", "unreadable"),
    ],
)
def test_rauc_complaints_are_named(text: str, reason: str) -> None:
    err = checks.classify_rauc_error("rauc-Message: 17:15:38.539: Reading bundle: /x\n" + text)
    assert isinstance(err, BundleRefused) and err.reason == reason
    assert "rauc-Message" not in err.message


def test_rauc_missing_its_own_tools_is_no_verdict_on_the_bundle() -> None:
    text = (
        "Failed to extract manifest from bundle: Failed to run unsquashfs: "
        "Failed to execute child process \u201cunsquashfs\u201d (No such file or directory)"
    )
    err = checks.classify_rauc_error(text)
    assert not isinstance(err, BundleRefused) and err.exit_code == 1
    assert "unsquashfs" in err.message


def test_debian_arch_names() -> None:
    assert checks.debian_arch("x86_64") == "amd64"
    assert checks.debian_arch("aarch64") == "arm64"
    assert checks.compatible_for("amd64") == "nodeos-amd64"
