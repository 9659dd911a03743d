"""Bearer tokens of the REST endpoint (pure): made, parsed, checked.

A token is `nodeos_<id>_<secret>`: 8 random bytes of id (hex) and 32 of secret (urlsafe base64).
The cluster keeps only `<role>:<sha256 of the secret>` under `nodeos/auth/<id>` in its map's
key/value space, so every member can check a token and a revocation reaches all of them with
the next applied entry; the token itself is shown once, to the console that made it, and never
logged. A revoked token's record reads `revoked`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re

from nodeos.api.auth import ROLES

PREFIX = "nodeos/auth/"
REVOKED = "revoked"
_TOKEN = re.compile(r"nodeos_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")


def new_token(role: str) -> tuple[str, str, str]:
    """(token, its id, the record the map keeps)."""
    if role not in ROLES:
        raise ValueError(role)
    token_id = os.urandom(8).hex()
    secret = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    return f"nodeos_{token_id}_{secret}", token_id, f"{role}:{_digest(secret)}"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def key_of(token_id: str) -> str:
    return PREFIX + token_id


def token_id_of(bearer: str) -> str | None:
    m = _TOKEN.fullmatch(bearer)
    return m.group(1) if m else None


def role_of(bearer: str, record: object) -> str | None:
    """The token's role if `record` (what the map keeps for its id) admits it, else None."""
    m = _TOKEN.fullmatch(bearer)
    if m is None or not isinstance(record, str) or ":" not in record:
        return None
    role, digest = record.split(":", 1)
    if role not in ROLES or not hmac.compare_digest(digest, _digest(m.group(2))):
        return None
    return role


def allows(role: str, write: bool) -> bool:
    return role == "admin" or not write
