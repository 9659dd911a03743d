"""Join tokens and the cluster identity a node keeps.

A token is opaque to operators: base64url of a msgpack map holding the cluster id, the
cluster secret and the address of a member to contact. Whoever has it can join, so it is
shown once by `cluster init` (and `cluster token`) and never logged.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import msgpack

from nodeos.errors import BadInput

TOKEN_VERSION = 1
SECRET_BYTES = 32


@dataclass(frozen=True)
class JoinToken:
    cluster_id: str
    secret: bytes
    address: str

    def encode(self) -> str:
        raw = msgpack.packb(
            {"v": TOKEN_VERSION, "cluster": self.cluster_id, "secret": self.secret, "addr": self.address},
            use_bin_type=True,
        )
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def __repr__(self) -> str:  # never print the secret
        return f"JoinToken(cluster_id={self.cluster_id!r}, address={self.address!r})"


def decode_token(text: str) -> JoinToken:
    bad = BadInput("token is not a join token from `nodeos cluster init` (or `cluster token`)", field="token")
    if not isinstance(text, str) or not text or len(text) > 4096:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
        obj = msgpack.unpackb(raw, raw=False)
    except (binascii.Error, ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        raise bad from None
    except Exception:
        raise bad from None
    if not isinstance(obj, dict) or obj.get("v") != TOKEN_VERSION:
        raise bad
    cid, secret, addr = obj.get("cluster"), obj.get("secret"), obj.get("addr")
    if not isinstance(cid, str) or not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
        raise bad
    if not isinstance(addr, str):
        raise bad
    return JoinToken(cid, secret, addr)
