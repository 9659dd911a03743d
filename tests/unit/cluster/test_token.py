"""Join tokens: round trip, no key in reprs, expiry and revocation, the secret wrapped, bad
tokens named as such."""

from __future__ import annotations

import base64

import msgpack
import pytest

from nodeos.cluster import token as tokens
from nodeos.cluster.token import JoinToken, decode_token
from nodeos.errors import BadInput


def test_round_trip_and_no_key_in_repr() -> None:
    t = JoinToken("c1", b"i" * 16, b"k" * 32, "10.0.0.1:7100", 1e9)
    assert decode_token(t.encode()) == t
    assert "k" * 8 not in repr(t) and "6b6b6b6b" not in repr(t)


def test_a_token_is_not_the_cluster_secret_and_expires() -> None:
    tok, rec = tokens.issue("c1", "10.0.0.1:7100", 600, now=1000.0)
    secret = b"S" * 32
    assert secret not in base64.urlsafe_b64decode(tok.encode() + "==")
    recs = {tok.token_id.hex(): rec}
    assert tokens.live_key(recs, tok.token_id, now=1599.0) == tok.key
    assert tokens.live_key(recs, tok.token_id, now=1600.0) is None  # expired
    assert tokens.live_key({}, tok.token_id, now=1000.0) is None  # revoked
    assert tokens.prune(recs, now=1600.0) == {}


def test_the_secret_travels_wrapped_under_the_tokens_key() -> None:
    key, secret = b"k" * 32, b"S" * 32
    w = tokens.wrap_secret(key, secret)
    assert secret not in w["c"] and tokens.unwrap_secret(key, w) == secret
    assert tokens.unwrap_secret(b"x" * 32, w) != secret
    assert tokens.wrap_secret(key, secret)["c"] != w["c"]  # a fresh pad each time


@pytest.mark.parametrize("ttl", [0, 59, 7 * 86400 + 1, "60", 1.5, True])
def test_bad_ttl_names_the_field(ttl: object) -> None:
    with pytest.raises(BadInput) as exc:
        tokens.check_ttl(ttl)
    assert exc.value.field == "ttl"


def _b64(obj: object) -> str:
    return base64.urlsafe_b64encode(msgpack.packb(obj)).decode()


GOOD = {"v": 2, "cluster": "c", "id": b"i" * 16, "key": b"k" * 32, "addr": "a:1", "exp": 1.0}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not a token",
        base64.urlsafe_b64encode(b"\xc1\xc1").decode(),
        _b64([1, 2]),
        _b64({"v": 1, "cluster": "c", "secret": b"k" * 32, "addr": "a"}),  # the old kind, with the secret
        _b64({**GOOD, "key": b"short"}),
        _b64({**GOOD, "id": b"short"}),
        _b64({**GOOD, "exp": "soon"}),
        "x" * 5000,
    ],
)
def test_bad_tokens_name_the_token_field(text: str) -> None:
    with pytest.raises(BadInput) as exc:
        decode_token(text)
    assert exc.value.field == "token"


@pytest.mark.parametrize(
    "ca", [b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", b"not pem", b"\xff\xfe"]
)
def test_a_token_whose_ca_was_damaged_is_the_operators_bad_token(ca: bytes) -> None:
    """Probe 7's kin: before, the join failed later in ssl and blamed the node's state (exit 1)."""
    t = JoinToken("c1", b"i" * 16, b"k" * 32, "10.0.0.1:7100", 1e9, ca=ca)
    with pytest.raises(BadInput) as e:
        decode_token(t.encode())
    assert e.value.field == "token" and e.value.exit_code == 2 and "damaged" in e.value.message
