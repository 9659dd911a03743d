"""Join tokens: round trip, secrets kept out of reprs, bad tokens named as such."""

from __future__ import annotations

import base64

import msgpack
import pytest

from nodeos.cluster.token import JoinToken, decode_token
from nodeos.errors import BadInput


def test_round_trip_and_no_secret_in_repr() -> None:
    t = JoinToken("c1", b"k" * 32, "10.0.0.1:7100")
    assert decode_token(t.encode()) == t
    assert "k" * 8 not in repr(t)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not a token",
        base64.urlsafe_b64encode(b"\xc1\xc1").decode(),
        base64.urlsafe_b64encode(msgpack.packb([1, 2])).decode(),
        base64.urlsafe_b64encode(
            msgpack.packb({"v": 2, "cluster": "c", "secret": b"k" * 32, "addr": "a"})
        ).decode(),
        base64.urlsafe_b64encode(
            msgpack.packb({"v": 1, "cluster": "c", "secret": b"short", "addr": "a"})
        ).decode(),
        "x" * 5000,
    ],
)
def test_bad_tokens_name_the_token_field(text: str) -> None:
    with pytest.raises(BadInput) as exc:
        decode_token(text)
    assert exc.value.field == "token"
