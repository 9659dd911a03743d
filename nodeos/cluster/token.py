"""Join tokens: short-lived, revocable credentials to join a cluster, separate from its secret.

A token is opaque to operators: base64url of a msgpack map holding the cluster id, the
address of the member that issued it, a token id, a random key and an expiry time. It does
not contain the cluster secret: the joining node proves the token's key to the issuing member
(nodeos/cluster/transport.py), and the member hands the secret back wrapped under that key
once the join is committed. The issuing member keeps the token (id -> key, expiry, allowed
uses) in its 0600 state until it expires or is revoked; it is shown once and never logged. A
token may allow a limited number of joins (`cluster token --uses N`): the joins made with it
are counted in the replicated map (token_map.py), so the limit holds cluster-wide.

Pure functions; the cluster service keeps the records.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

import msgpack

from nodeos.cluster.secretroll import MemberKeys
from nodeos.errors import BadInput

TOKEN_VERSION = 2
SECRET_BYTES = 32
TOKEN_ID_BYTES = 16
DEFAULT_TTL_S = 3600
INIT_TTL_S = 900  # the token `cluster init` prints: it lands in a terminal's scrollback
MAX_TTL_S = 7 * 86400
MAX_USES = 1000


@dataclass(frozen=True)
class JoinToken:
    cluster_id: str
    token_id: bytes
    key: bytes
    address: str
    expires: float
    ca: bytes = b""  # the cluster CA's certificate (PEM, public): the joiner's TLS trust anchor

    def encode(self) -> str:
        raw = msgpack.packb(
            {
                "v": TOKEN_VERSION,
                "cluster": self.cluster_id,
                "id": self.token_id,
                "key": self.key,
                "addr": self.address,
                "exp": self.expires,
                **({"ca": self.ca} if self.ca else {}),
            },
            use_bin_type=True,
        )
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def __repr__(self) -> str:  # never print the key
        return (
            f"JoinToken(cluster_id={self.cluster_id!r}, id={self.token_id.hex()}, address={self.address!r})"
        )


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
    cid, tid, key, addr, exp = (obj.get(k) for k in ("cluster", "id", "key", "addr", "exp"))
    if not isinstance(cid, str) or not isinstance(addr, str) or not isinstance(exp, (int, float)):
        raise bad
    if not isinstance(tid, bytes) or len(tid) != TOKEN_ID_BYTES:
        raise bad
    if not isinstance(key, bytes) or len(key) != SECRET_BYTES:
        raise bad
    ca = obj.get("ca", b"")
    if not isinstance(ca, bytes):
        raise bad
    if ca:
        _check_ca(ca)
    return JoinToken(cid, tid, key, addr, float(exp), ca)


def _check_ca(ca: bytes) -> None:
    """The token's CA loads as a certificate: a damaged one is the operator's bad token (exit 2),
    not the joining node's state failing (as ssl's error, met later in the join, made it)."""
    import ssl  # here, not at the top: the console checks tokens and starts lean

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=ca.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError):
        raise BadInput(
            "the token is damaged (its cluster CA certificate does not load): copy it again, "
            "or ask a member for a new one (`nodeos cluster token`)",
            field="token",
        ) from None


def check_ttl(v: Any, default: int = DEFAULT_TTL_S) -> int:
    if v is None:
        return default
    if type(v) is not int or not 60 <= v <= MAX_TTL_S:
        raise BadInput(f"ttl must be a whole number of seconds from 60 to {MAX_TTL_S}", field="ttl")
    return v


def check_uses(v: Any) -> int | None:
    """How many joins a token allows: None (omitted) is any number until it expires."""
    if v is None:
        return None
    if type(v) is not int or not 1 <= v <= MAX_USES:
        raise BadInput(
            f"uses must be a whole number from 1 to {MAX_USES} (1: single use), or omitted for any "
            "number of joins until the token expires",
            field="uses",
        )
    return v


def issue(
    cluster_id: str, address: str, ttl_s: int, now: float, ca: bytes = b"", uses: int | None = None
) -> tuple[JoinToken, dict[str, Any]]:
    """A new token and the record its issuer keeps (by token id hex)."""
    tok = JoinToken(
        cluster_id, os.urandom(TOKEN_ID_BYTES), os.urandom(SECRET_BYTES), address, now + ttl_s, ca
    )
    rec: dict[str, Any] = {"key": tok.key, "expires": tok.expires, "created": now}
    if uses is not None:
        rec["uses"] = uses
    return tok, rec


def use_request(records: dict[str, Any], token_id: bytes, now: float) -> dict[str, Any] | None:
    """What the leader records in the map for a join with a token of limited uses (None: any
    number of uses, nothing to record). The count is kept in the replicated map, not here, so
    it holds whichever member runs the join and whoever leads (nodeos/cluster/token_map.py)."""
    rec = records.get(token_id.hex())
    if not isinstance(rec, dict) or rec.get("uses") is None:
        return None
    return {
        "token_id": token_id.hex(),
        "uses": int(rec["uses"]),
        "expires": float(rec["expires"]),
        "now": now,
    }


def live_key(records: dict[str, Any], token_id: bytes, now: float) -> bytes | None:
    """The key of an unexpired, unrevoked token; None otherwise."""
    rec = records.get(token_id.hex())
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), bytes):
        return None
    return rec["key"] if float(rec.get("expires", 0)) > now else None


def prune(records: dict[str, Any], now: float) -> dict[str, Any]:
    return {k: v for k, v in records.items() if isinstance(v, dict) and float(v.get("expires", 0)) > now}


def _pad(key: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, b"nodeos secret wrap\0" + nonce, hashlib.sha256).digest()


def wrap_secret(key: bytes, secret: bytes) -> dict[str, bytes]:
    """The cluster secret under a token's key (a fresh HMAC pad; the session MAC guards integrity)."""
    nonce = os.urandom(16)
    return {"n": nonce, "c": bytes(a ^ b for a, b in zip(secret, _pad(key, nonce), strict=True))}


def unwrap_secret(key: bytes, wrapped: Any) -> bytes:
    if not isinstance(wrapped, dict) or not isinstance(wrapped.get("n"), bytes):
        raise BadInput("the member sent no cluster secret for this token", field="token")
    c = wrapped.get("c")
    if not isinstance(c, bytes) or len(c) != SECRET_BYTES:
        raise BadInput("the member sent a malformed cluster secret", field="token")
    return bytes(a ^ b for a, b in zip(c, _pad(key, wrapped["n"]), strict=True))


def wrap_keys(key: bytes, keys: MemberKeys) -> dict[str, Any]:
    """What a joiner gets: the secret it dials with and, during a roll, the others accepted."""
    return {
        "secret": wrap_secret(key, keys.dial),
        "secret_gen": keys.dial_gen,
        "secrets": {str(g): wrap_secret(key, s) for g, s in keys.secrets.items() if g != keys.dial_gen},
    }


def unwrap_keys(key: bytes, reply: dict[str, Any]) -> MemberKeys:
    gen = reply.get("secret_gen", 0)  # a member from before rotation sends generation 0 only
    more = reply.get("secrets") or {}
    if type(gen) is not int or gen < 0 or not isinstance(more, dict):
        raise BadInput("the member sent a malformed secret generation", field="token")
    held = {int(g): unwrap_secret(key, w) for g, w in more.items() if str(g).isdigit()}
    held[gen] = unwrap_secret(key, reply.get("secret"))
    return MemberKeys(gen, held)
