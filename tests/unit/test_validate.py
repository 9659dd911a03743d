"""Validators: examples an operator would type, and properties over generated input."""

from __future__ import annotations

import base64
import os
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeos import validate
from nodeos.errors import BadInput

# --- sizes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10GiB", 10 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("10GB", 10 * 1000**3),
        ("1048576", 1048576),
        ("1.5GiB", 1536 * 1024**2),
        ("2 tib", 2 * 1024**4),
        ("4M", 4 * 1024**2),
        (" 1G ", 1024**3),
    ],
)
def test_size_examples(text: str, expected: int) -> None:
    assert validate.size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "ten", "10XB", "-1GiB", "1e9", "1.1B", "GiB", "1,5GiB", "0", "1KiB", "2EiB"]
)
def test_size_rejects_with_field(text: str) -> None:
    with pytest.raises(BadInput) as ei:
        validate.size(text)
    assert ei.value.field == "size"
    assert ei.value.allowed


@pytest.mark.parametrize("value", [True, None, 1.5, [1]])
def test_size_rejects_non_sizes(value: object) -> None:
    with pytest.raises(BadInput):
        validate.size(value)


@given(st.integers(min_value=validate.SIZE_MIN, max_value=validate.SIZE_MAX))
def test_size_bytes_roundtrip(n: int) -> None:
    assert validate.size(str(n)) == n
    assert validate.size(n) == n


@given(
    st.integers(min_value=1, max_value=100_000),
    st.sampled_from(["MiB", "GiB", "TiB", "MB", "GB", "TB", "mib", "gb"]),
)
def test_size_with_unit_is_number_times_unit(n: int, unit: str) -> None:
    mult = validate._UNITS[unit.lower()]
    if validate.SIZE_MIN <= n * mult <= validate.SIZE_MAX:
        assert validate.size(f"{n}{unit}") == n * mult
    else:
        with pytest.raises(BadInput):
            validate.size(f"{n}{unit}")


@given(st.text(max_size=20))
def test_size_never_crashes_and_is_in_range(text: str) -> None:
    try:
        n = validate.size(text)
    except BadInput as err:
        assert err.field == "size"
    else:
        assert validate.SIZE_MIN <= n <= validate.SIZE_MAX


@given(st.integers(min_value=1, max_value=2**62))
def test_format_size_parses_back_when_exact(n: int) -> None:
    text = validate.format_size(n)
    if "." not in text and n >= validate.SIZE_MIN:
        assert validate.size(text, maximum=2**63) == n


# --- names --------------------------------------------------------------------------------

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@given(st.text(max_size=80))
def test_name_accepts_exactly_the_documented_set(text: str) -> None:
    if NAME_RE.fullmatch(text):
        assert validate.name(text) == text
    else:
        with pytest.raises(BadInput) as ei:
            validate.name(text, "pool")
        assert ei.value.field == "pool"


@given(st.from_regex(NAME_RE, fullmatch=True))
def test_valid_names_pass(text: str) -> None:
    assert validate.name(text) == text


@pytest.mark.parametrize("bad", ["", "-x", ".x", "a b", "a/b", "x" * 64, "ä", None, 5])
def test_name_examples(bad: object) -> None:
    with pytest.raises(BadInput):
        validate.name(bad)


# --- NQNs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "good",
    [
        "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
        "nqn.2014-08.io.nodeos:vol:0f8fad5b-d9cb-469f-a165-70867728950e",
        "nqn.2024-01.com.example:gpu-node-1",
        "nqn.2024-01.com.example",
    ],
)
def test_nqn_examples_pass(good: str) -> None:
    assert validate.host_nqn(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "nqn",
        "iqn.2024-01.com.example:x",
        "nqn.24-01.com.example:x",
        "nqn.2024-13.com.example:x",
        "nqn.2024-01.:x",
        "nqn.2024-01.com..example:x",
        "nqn.2024-01.com.example:with space",
        "nqn.2024-01.com.example:tab\there",
        "nqn.2014-08.org.nvmexpress:uuid:xyz",
        "nqn.2014-08.org.nvmexpress.discovery",
        "nqn.2024-01.com.example:" + "a" * 200,
    ],
)
def test_nqn_examples_fail_naming_the_field(bad: str) -> None:
    with pytest.raises(BadInput) as ei:
        validate.host_nqn(bad, "host")
    assert ei.value.field == "host"


@given(st.integers(min_value=1, max_value=400))
def test_nqn_length_limit_is_223_bytes(extra: int) -> None:
    base = "nqn.2024-01.com.example:"
    value = base + "a" * extra
    if len(value) <= 223:
        assert validate.nqn(value) == value
    else:
        with pytest.raises(BadInput, match="223 bytes"):
            validate.nqn(value)


@given(st.integers(min_value=1, max_value=120))
def test_nqn_limit_counts_utf8_bytes_not_characters(n: int) -> None:
    value = "nqn.2024-01.com.example:" + "é" * n  # 2 bytes each
    if len(value.encode()) <= 223:
        validate.nqn(value)
    else:
        with pytest.raises(BadInput):
            validate.nqn(value)


@given(st.uuids())
def test_uuid_nqns_pass(u: uuid.UUID) -> None:
    v = f"nqn.2014-08.org.nvmexpress:uuid:{u}"
    assert validate.nqn(v) == v


@given(st.text(max_size=240))
def test_nqn_never_crashes(text: str) -> None:
    try:
        validate.nqn(text)
    except BadInput as err:
        assert err.field == "nqn"
    else:
        assert text.startswith("nqn.") and len(text.encode()) <= 223
        assert not any(c.isspace() for c in text)


# --- QoS ----------------------------------------------------------------------------------


@given(st.integers(min_value=-(10**9), max_value=10**9))
def test_qos_iops_range_and_step(n: int) -> None:
    ok = validate.QOS_IOPS_MIN <= n <= validate.QOS_IOPS_MAX and n % 1000 == 0
    if ok:
        assert validate.qos_iops(n) == n
    else:
        with pytest.raises(BadInput) as ei:
            validate.qos_iops(n)
        assert ei.value.field == "qos_iops"


@given(st.integers(min_value=-(10**7), max_value=10**7))
def test_qos_mbps_range(n: int) -> None:
    if validate.QOS_MBPS_MIN <= n <= validate.QOS_MBPS_MAX:
        assert validate.qos_mbps(n) == n
    else:
        with pytest.raises(BadInput) as ei:
            validate.qos_mbps(n)
        assert ei.value.field == "qos_mbps"


def test_qos_none_means_unlimited_and_types_are_checked() -> None:
    assert validate.qos_iops(None) is None and validate.qos_mbps(None) is None
    for bad in (True, "1000", 1000.0):
        with pytest.raises(BadInput):
            validate.qos_iops(bad)


# --- DH-HMAC-CHAP -------------------------------------------------------------------------


@given(st.sampled_from([(0, 32), (0, 48), (0, 64), (1, 32), (2, 48), (3, 64)]), st.data())
def test_dhchap_generated_keys_pass(hk: tuple[int, int], data: st.DataObject) -> None:
    hash_id, length = hk
    key = data.draw(st.binary(min_size=length, max_size=length))
    secret = validate.make_dhchap_secret(key, hash_id)
    assert validate.dhchap_secret(secret) == secret


def test_dhchap_known_format_from_nvme_cli_shape() -> None:
    key = os.urandom(32)
    s = validate.make_dhchap_secret(key, 1)
    assert s.startswith("DHHC-1:01:") and s.endswith(":")
    assert base64.b64decode(s.split(":")[2])[:32] == key


@given(st.binary(min_size=32, max_size=32), st.integers(min_value=0, max_value=35 * 8 - 1))
def test_dhchap_any_bit_flip_is_caught(key: bytes, bit: int) -> None:
    raw = bytearray(key + __import__("zlib").crc32(key).to_bytes(4, "little"))
    raw[bit // 8] ^= 1 << (bit % 8)
    secret = f"DHHC-1:01:{base64.b64encode(bytes(raw)).decode()}:"
    with pytest.raises(BadInput) as ei:
        validate.dhchap_secret(secret)
    assert ei.value.field == "dhchap_secret"
    assert secret.split(":")[2] not in ei.value.message  # never echoes the secret


@pytest.mark.parametrize(
    "bad",
    [
        "secret",
        "DHHC-1:04:AAAA:",
        "DHHC-1:01:not base64!:",
        "DHHC-1:01:" + base64.b64encode(bytes(40)).decode() + ":",
        "DHHC-1:02:" + validate.make_dhchap_secret(bytes(32), 2).split(":")[2] + ":",  # 32-byte key, hash 02
        validate.make_dhchap_secret(bytes(32), 1)[:-1],  # trailing colon missing
    ],
)
def test_dhchap_bad_examples(bad: str) -> None:
    with pytest.raises(BadInput):
        validate.dhchap_secret(bad)


# --- misc ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:7100", ("127.0.0.1", 7100)), ("[::1]:9", ("::1", 9)), ("n1:1", ("n1", 1))],
)
def test_host_port(text: str, expected: tuple[str, int]) -> None:
    assert validate.host_port(text) == expected


@pytest.mark.parametrize("bad", ["7100", "h:", ":1", "h:0", "h:70000", "::1:5", None])
def test_host_port_bad(bad: object) -> None:
    with pytest.raises(BadInput):
        validate.host_port(bad)


def test_drive_ids() -> None:
    assert validate.drive_ids("all") == "all"
    assert validate.drive_ids("a, b") == ["a", "b"]
    for bad in ("", "a,", "a,a", 5):
        with pytest.raises(BadInput) as ei:
            validate.drive_ids(bad)
        assert ei.value.field == "drives"
