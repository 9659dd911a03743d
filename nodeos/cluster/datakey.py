"""The cluster data key and the sealed host secrets it guards (pure).

DH-HMAC-CHAP host secrets live in the replicated map, and so in every member's Raft log and
snapshots. They are sealed there: AES-256-GCM under the cluster *data key*, a random key every
member holds in its 0600 identity record (`<state-dir>/cluster/meta`, beside the cluster
secret), never in the Raft log or a snapshot. A copy of the log or of a snapshot alone gives
the secrets away no more than the ciphertext does.

A sealed secret is a string, so the map's shape does not change:

    nodeos-sealed-1:<key id>:<base64url(nonce 12 bytes || ciphertext || tag 16 bytes)>

The associated data binds the format version, the key id and the host NQN: a sealed secret
copied onto another host, or a key id edited, fails to open instead of opening as the wrong
host's secret. It does not start with `DHHC-1:`, so a member from before (which would pass it
on as the secret itself) is refused by its data plane's spec check instead of exporting a
wrong key.

The key id is derived from the key (an HMAC of a fixed label): a member handed a key checks
it against its id. Several keys may be held (`data_keys`: id -> key); the current one
(`data_key`) seals, any held one opens; that is what a rotation of the data key would use
(docs/cluster.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from nodeos.errors import BadInput, OperationFailed

PREFIX = "nodeos-sealed-1:"
KEY_BYTES = 32
NONCE_BYTES = 12
KID_CHARS = 16
# Bound into each sealed secret: which secret of the host it is (a sealed TLS key copied into
# the DH-HMAC-CHAP field, or back, fails to open).
_AAD = {"dhchap_secret": b"nodeos dhchap v1\0", "tls_key": b"nodeos tls psk v1\0"}
_WHAT = {"dhchap_secret": "DH-HMAC-CHAP secret", "tls_key": "TLS key"}
_WRAP_AAD = b"nodeos data key wrap\0"


class SecretUnreadable(OperationFailed):
    """A sealed host secret this member cannot open (no such key here, or it was altered)."""


@dataclass(frozen=True)
class DataKeys:
    """A member's data keys: `current` seals (None: it holds none yet), every one opens."""

    current: str | None
    keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:  # never print a key
        return f"DataKeys(current={self.current!r}, ids={sorted(self.keys)})"


def key_id(key: bytes) -> str:
    return hmac.new(key, b"nodeos data key id", hashlib.sha256).hexdigest()[:KID_CHARS]


def new_keys() -> DataKeys:
    return add_key(DataKeys(None), os.urandom(KEY_BYTES), current=True)


def add_key(keys: DataKeys, key: bytes, current: bool) -> DataKeys:
    """`keys` and `key`; `current`: it seals from now on (else the current one stays)."""
    kid = key_id(key)
    return DataKeys(kid if current else keys.current, {**keys.keys, kid: key})


def keys_of(identity: Mapping[str, Any] | None) -> DataKeys:
    """The data keys in an identity record (one from before holds none)."""
    if not identity:
        return DataKeys(None)
    held = {
        str(k): v
        for k, v in (identity.get("data_keys") or {}).items()
        if isinstance(v, bytes) and len(v) == KEY_BYTES and key_id(v) == k
    }
    cur = identity.get("data_key")
    return DataKeys(cur if cur in held else None, held)


def with_keys(identity: dict[str, Any], keys: DataKeys) -> dict[str, Any]:
    return {**identity, "data_key": keys.current, "data_keys": dict(keys.keys)}


# --- sealing host secrets ---------------------------------------------------------------------


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def sealed_key_id(value: str) -> str:
    return value[len(PREFIX) :].split(":", 1)[0]


def _aad(kid: str, nqn: str, field: str) -> bytes:
    return _AAD[field] + kid.encode() + b"\0" + nqn.encode()


def seal(keys: DataKeys, nqn: str, secret: str, field: str = "dhchap_secret") -> str:
    """`secret` for host `nqn` sealed under the current data key; `field`: which of the host's
    secrets it is (dhchap_secret, tls_key)."""
    if keys.current is None:
        raise OperationFailed("this member holds no cluster data key to seal a host secret with")
    nonce = os.urandom(NONCE_BYTES)
    ct = AESGCM(keys.keys[keys.current]).encrypt(nonce, secret.encode(), _aad(keys.current, nqn, field))
    return PREFIX + keys.current + ":" + base64.urlsafe_b64encode(nonce + ct).decode().rstrip("=")


def open_secret(keys: DataKeys, nqn: str, value: str, field: str = "dhchap_secret") -> str:
    """The secret a sealed value holds; a plain one (a map from before sealing) as it is.
    SecretUnreadable (naming the host and key id, never a secret) when it cannot be opened."""
    if not is_sealed(value):
        return value
    body = value[len(PREFIX) :]
    kid, _, blob = body.partition(":")
    key = keys.keys.get(kid)
    what = _WHAT[field]
    if key is None:
        raise SecretUnreadable(
            f"host {nqn}: its {what} is sealed under cluster data key {kid}, which "
            "this node does not hold (a member that joined without it, or one from before): it "
            'exports no key rather than a wrong one; see docs/cluster.md, "Host secrets"',
            field=field,
        )
    try:
        raw = base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4))
        if len(raw) <= NONCE_BYTES:
            raise ValueError("short")
        plain = AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(kid, nqn, field))
        return plain.decode()
    except (InvalidTag, ValueError, binascii.Error, UnicodeDecodeError):
        raise SecretUnreadable(
            f"host {nqn}: its sealed {what} does not open under data key {kid} "
            "(altered, or sealed for another host)",
            field=field,
        ) from None


def open_hosts(
    hosts: Mapping[str, Mapping[str, Any]], keys: DataKeys, cache: dict[tuple[str, str], str] | None = None
) -> dict[str, dict[str, Any]]:
    """The map's hosts with their secrets (DH-HMAC-CHAP secret, TLS key) opened, for an export
    spec. A host whose secret does not open keeps none and says why in `dhchap_error` or
    `tls_error` (model.host_access refuses to export it: no key would be an export without
    authentication, or without TLS). `cache`: openings already done."""
    out: dict[str, dict[str, Any]] = {}
    for nqn, h in hosts.items():
        rec = dict(h or {})
        for name, err_name in (("dhchap_secret", "dhchap_error"), ("tls_key", "tls_error")):
            value = rec.get(name)
            if not is_sealed(value):
                continue
            ck = (nqn, value)
            try:
                known = cache is not None and ck in cache
                plain = cache[ck] if known and cache is not None else open_secret(keys, nqn, value, name)
            except SecretUnreadable as err:
                rec[name], rec[err_name] = None, err.message
                continue
            if cache is not None:
                if len(cache) > 4096:  # hosts re-added with new secrets: drop what may be stale
                    cache.clear()
                cache[ck] = plain
            rec[name] = plain
        out[nqn] = rec
    return out


def plain_hosts(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Hosts whose secret is still in plain text in the map (from before sealing), sorted."""
    return sorted(
        n for n, h in hosts.items() if (h or {}).get("dhchap_secret") and not is_sealed(h["dhchap_secret"])
    )


# --- handing keys to other members ------------------------------------------------------------


def wrap_keys(wrapping_key: bytes, keys: DataKeys) -> dict[str, Any]:
    """Every key held, each under `wrapping_key` (a join token's key, or one derived from the
    cluster secret): `{current, keys: {id: {n, c}}}`."""
    aes = AESGCM(wrapping_key)
    wrapped = {}
    for kid, key in sorted(keys.keys.items()):
        nonce = os.urandom(NONCE_BYTES)
        wrapped[kid] = {"n": nonce, "c": aes.encrypt(nonce, key, _WRAP_AAD + kid.encode())}
    return {"current": keys.current, "keys": wrapped}


def unwrap_keys(wrapping_key: bytes, msg: Any) -> DataKeys:
    """The keys `wrap_keys` made; BadInput if any does not open or does not match its id."""
    if not isinstance(msg, dict) or not isinstance(msg.get("keys"), dict):
        raise BadInput("the member sent no cluster data keys", field="data_keys")
    aes = AESGCM(wrapping_key)
    held: dict[str, bytes] = {}
    for kid, w in msg["keys"].items():
        if not isinstance(kid, str) or not isinstance(w, dict):
            raise BadInput("a cluster data key is malformed", field="data_keys")
        n, c = w.get("n"), w.get("c")
        if not isinstance(n, bytes) or not isinstance(c, bytes) or len(n) != NONCE_BYTES:
            raise BadInput("a cluster data key is malformed", field="data_keys")
        try:
            key = aes.decrypt(n, c, _WRAP_AAD + kid.encode())
        except InvalidTag:
            raise BadInput(f"cluster data key {kid} does not open", field="data_keys") from None
        if len(key) != KEY_BYTES or key_id(key) != kid:
            raise BadInput(f"cluster data key {kid} does not match its id", field="data_keys")
        held[kid] = key
    cur = msg.get("current")
    return DataKeys(cur if cur in held else None, held)


def merge(mine: DataKeys, theirs: DataKeys) -> DataKeys:
    """Keys held after taking `theirs`: every key of both; theirs' current one seals from now
    (the leader's choice), mine if they name none."""
    return DataKeys(theirs.current or mine.current, {**mine.keys, **theirs.keys})


def stage_wrapping_key(secret: bytes) -> bytes:
    """The key data keys travel under between members: derived from a cluster secret (the TLS
    link encrypts them too; this keeps them sealed on a member from before TLS)."""
    return hmac.new(secret, b"nodeos data key stage", hashlib.sha256).digest()
