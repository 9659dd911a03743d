"""Checks on the names the data plane is handed (pool/volume ids, NQNs, NGUIDs).

The daemon validates user input first; these checks are the data plane's own guard so a
bad id can never reach LVM, SPDK or configfs (where the error would be cryptic or, for
configfs paths, dangerous).
"""

from __future__ import annotations

import re
import uuid as _uuid

from nodeos.errors import BadInput
from nodeos.sysfs import uuid_digits

# LVM, SPDK lvol and configfs all accept this; 1 leading alnum keeps "-x" options and "." out.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,47}$")
NQN_MAX_BYTES = 223
_NQN_RE = re.compile(r"^nqn\.\d{4}-\d{2}\.[A-Za-z0-9][A-Za-z0-9.-]*(:[^\s/]+)?$")
_UUID_NQN_RE = re.compile(r"^nqn\.2014-08\.org\.nvmexpress:uuid:[0-9a-fA-F-]{36}$")


def check_id(value: str, field: str) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise BadInput(
            f"{field} {value!r} is not a valid id",
            field=field,
            allowed="1-48 characters: letters, digits, '_', '.', '+', '-', starting with a letter or digit",
        )
    return value


def check_nqn(value: str, field: str = "nqn") -> str:
    if not isinstance(value, str) or not value:
        raise BadInput(f"{field} is empty", field=field, allowed="nqn.yyyy-mm.reverse.domain:name")
    if len(value.encode()) > NQN_MAX_BYTES:
        raise BadInput(
            f"{field} is {len(value.encode())} bytes long; NQNs are at most {NQN_MAX_BYTES} bytes",
            field=field,
            allowed=f"at most {NQN_MAX_BYTES} bytes",
        )
    if "/" in value or not (_NQN_RE.match(value) or _UUID_NQN_RE.match(value)):
        raise BadInput(
            f"{field} {value!r} is not an NVMe qualified name",
            field=field,
            allowed="nqn.yyyy-mm.reverse.domain[:name] without '/' or whitespace",
        )
    return value


def normalize_nguid(value: str, field: str = "nguid") -> str:
    """32 lowercase hex digits (configfs and SPDK print NGUIDs differently; compare these)."""
    digits = uuid_digits(value) if isinstance(value, str) else ""
    if len(digits) != 32 or any(c not in "0123456789abcdef" for c in digits):
        raise BadInput(f"{field} {value!r} is not 32 hex digits", field=field, allowed="32 hex digits")
    return digits


def normalize_uuid(value: str, field: str = "uuid") -> str:
    try:
        return str(_uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise BadInput(f"{field} {value!r} is not a UUID", field=field, allowed="a UUID") from None


def check_serial(value: str, field: str = "serial") -> str:
    # NVMe SN is 20 ASCII bytes; both targets refuse longer ones with a vague error.
    ok = isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isprintable()
    if not ok:
        raise BadInput(
            f"{field} {value!r} is not a valid serial", field=field, allowed="1-20 printable ASCII"
        )
    return value
