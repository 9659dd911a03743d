"""Validators for everything an operator types: names, sizes, NQNs, QoS, DH-HMAC-CHAP keys.

Each validator is pure, returns the normalised value and raises BadInput naming the field
and the allowed values. The daemon validates every request with these before it records an
intent or touches the data plane, so bad input changes nothing. The CLI calls the same
functions first so a typo is reported without a round trip.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from typing import Any

from nodeos.errors import BadInput

# --- names --------------------------------------------------------------------------------

NAME_MAX = 63
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_ALLOWED = f"1-{NAME_MAX} characters: letters, digits, '.', '_', '-'; starting with a letter or digit"


def name(value: Any, field: str = "name") -> str:
    """A pool, volume or snapshot name."""
    if not isinstance(value, str):
        raise BadInput(f"{field} must be a string", field=field, allowed=NAME_ALLOWED)
    if not value:
        raise BadInput(f"{field} is empty", field=field, allowed=NAME_ALLOWED)
    if len(value) > NAME_MAX:
        raise BadInput(
            f"{field} is {len(value)} characters long; the limit is {NAME_MAX}",
            field=field,
            allowed=NAME_ALLOWED,
        )
    if not _NAME_RE.fullmatch(value):
        raise BadInput(
            f"{field} {value!r} has characters that are not allowed", field=field, allowed=NAME_ALLOWED
        )
    return value


# --- sizes --------------------------------------------------------------------------------

# Binary and decimal units, case-insensitive; a bare number is bytes.
_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tib": 1024**4,
    "p": 1024**5,
    "pib": 1024**5,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "pb": 1000**5,
}
_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")
SIZE_MIN = 1024**2  # 1 MiB: below that no backend makes a useful volume
SIZE_MAX = 1024**6  # 1 EiB: the most any backend here can address
SIZE_ALLOWED = "a number of bytes, or with a unit: KiB MiB GiB TiB PiB (binary), KB MB GB TB PB (decimal)"


def size(value: Any, field: str = "size", *, minimum: int = SIZE_MIN, maximum: int = SIZE_MAX) -> int:
    """Parse "10GiB", "512MiB", "10GB", "1048576" (or an int) into bytes."""
    if isinstance(value, bool):
        raise BadInput(f"{field} must be a size", field=field, allowed=SIZE_ALLOWED)
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = _SIZE_RE.fullmatch(value)
        if not m:
            raise BadInput(f"{field} {value!r} is not a size", field=field, allowed=SIZE_ALLOWED)
        number, unit = m.group(1), m.group(2).lower()
        if unit not in _UNITS:
            raise BadInput(
                f"{field} {value!r} has an unknown unit {m.group(2)!r}", field=field, allowed=SIZE_ALLOWED
            )
        mult = _UNITS[unit]
        if "." in number:
            whole, frac = number.split(".")
            # Exact arithmetic: 1.5GiB is 1610612736 bytes, not a float approximation.
            num = int(whole + frac)
            den = 10 ** len(frac)
            if (num * mult) % den:
                raise BadInput(
                    f"{field} {value!r} is not a whole number of bytes", field=field, allowed=SIZE_ALLOWED
                )
            n = num * mult // den
        else:
            n = int(number) * mult
    else:
        raise BadInput(f"{field} must be a size", field=field, allowed=SIZE_ALLOWED)
    if n < minimum:
        raise BadInput(
            f"{field} of {n} bytes is too small; the minimum is {format_size(minimum)}",
            field=field,
            allowed=f">= {minimum} bytes",
        )
    if n > maximum:
        raise BadInput(
            f"{field} of {n} bytes is too large; the maximum is {format_size(maximum)}",
            field=field,
            allowed=f"<= {maximum} bytes",
        )
    return n


def format_size(n: int) -> str:
    """Human rendering with binary units, exact when it can be."""
    for unit, mult in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= mult:
            if n % mult == 0:
                return f"{n // mult}{unit}"
            return f"{n / mult:.1f}{unit}"
    return f"{n}B"


# --- NQNs ---------------------------------------------------------------------------------

NQN_MAX_BYTES = 223  # NVMe base spec: NQNs are at most 223 bytes of UTF-8
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"
_UUID_NQN_RE = re.compile(
    r"nqn\.2014-08\.org\.nvmexpress:uuid:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
# nqn.<yyyy-mm>.<reverse domain>[:<anything printable>]
_NQN_RE = re.compile(
    r"nqn\.(\d{4})-(\d{2})\.([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*)(?::(.+))?"
)
NQN_ALLOWED = (
    "nqn.yyyy-mm.<reverse domain>[:<string>] or nqn.2014-08.org.nvmexpress:uuid:<uuid>, "
    f"at most {NQN_MAX_BYTES} bytes"
)


def nqn(value: Any, field: str = "nqn") -> str:
    """An NVMe Qualified Name (host or subsystem)."""
    if not isinstance(value, str) or not value:
        raise BadInput(f"{field} must be a non-empty NQN", field=field, allowed=NQN_ALLOWED)
    size_b = len(value.encode("utf-8"))
    if size_b > NQN_MAX_BYTES:
        raise BadInput(
            f"{field} is {size_b} bytes long; an NQN is at most {NQN_MAX_BYTES} bytes",
            field=field,
            allowed=NQN_ALLOWED,
        )
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        raise BadInput(f"{field} contains whitespace or control characters", field=field, allowed=NQN_ALLOWED)
    if value.startswith("nqn.2014-08.org.nvmexpress:uuid:"):
        if not _UUID_NQN_RE.fullmatch(value):
            raise BadInput(f"{field} {value!r} has a malformed UUID", field=field, allowed=NQN_ALLOWED)
        return value
    m = _NQN_RE.fullmatch(value)
    if not m:
        raise BadInput(f"{field} {value!r} is not a valid NQN", field=field, allowed=NQN_ALLOWED)
    year, month = int(m.group(1)), int(m.group(2))
    if not 1 <= month <= 12 or year < 1970:
        raise BadInput(
            f"{field} {value!r} has an invalid date {m.group(1)}-{m.group(2)}",
            field=field,
            allowed=NQN_ALLOWED,
        )
    return value


def host_nqn(value: Any, field: str = "host") -> str:
    v = nqn(value, field)
    if v == DISCOVERY_NQN:
        raise BadInput(
            f"{field} is the well-known discovery NQN, not a host NQN", field=field, allowed=NQN_ALLOWED
        )
    return v


# --- QoS ----------------------------------------------------------------------------------

# SPDK takes IOPS limits in multiples of 1000; the same rule everywhere keeps volumes portable.
QOS_IOPS_MIN = 1000
QOS_IOPS_MAX = 100_000_000
QOS_IOPS_STEP = 1000
QOS_MBPS_MIN = 1
QOS_MBPS_MAX = 1_000_000


def qos_iops(value: Any, field: str = "qos_iops") -> int | None:
    if value is None:
        return None
    allowed = f"{QOS_IOPS_MIN}..{QOS_IOPS_MAX} in steps of {QOS_IOPS_STEP}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{field} must be a whole number", field=field, allowed=allowed)
    if not QOS_IOPS_MIN <= value <= QOS_IOPS_MAX or value % QOS_IOPS_STEP:
        raise BadInput(f"{field} {value} is out of range", field=field, allowed=allowed)
    return value


def qos_mbps(value: Any, field: str = "qos_mbps") -> int | None:
    if value is None:
        return None
    allowed = f"{QOS_MBPS_MIN}..{QOS_MBPS_MAX}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{field} must be a whole number", field=field, allowed=allowed)
    if not QOS_MBPS_MIN <= value <= QOS_MBPS_MAX:
        raise BadInput(f"{field} {value} is out of range", field=field, allowed=allowed)
    return value


# --- DH-HMAC-CHAP -------------------------------------------------------------------------

DHCHAP_ALLOWED = (
    "DHHC-1:<hash 00|01|02|03>:<base64 of a 32, 48 or 64 byte key + CRC-32>: "
    "(as printed by nvme gen-dhchap-key)"
)
_DHCHAP_RE = re.compile(r"DHHC-1:(0[0-3]):([A-Za-z0-9+/]+={0,2}):")
# Key length implied by the transformation hash; 00 (none) takes any of them.
_DHCHAP_LEN = {"00": (32, 48, 64), "01": (32,), "02": (48,), "03": (64,)}


def dhchap_secret(value: Any, field: str = "dhchap_secret") -> str | None:
    """A DH-HMAC-CHAP secret in the NVMe TP 8006 representation. Never echoed in errors."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{field} must be a string", field=field, allowed=DHCHAP_ALLOWED)
    m = _DHCHAP_RE.fullmatch(value)
    if not m:
        raise BadInput(f"{field} is not in DHHC-1 format", field=field, allowed=DHCHAP_ALLOWED)
    try:
        raw = base64.b64decode(m.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise BadInput(f"{field} has invalid base64", field=field, allowed=DHCHAP_ALLOWED) from None
    key, crc = raw[:-4], raw[-4:]
    if len(key) not in _DHCHAP_LEN[m.group(1)]:
        raise BadInput(
            f"{field} holds a {len(key)}-byte key; hash {m.group(1)} needs {_DHCHAP_LEN[m.group(1)]} bytes",
            field=field,
            allowed=DHCHAP_ALLOWED,
        )
    if zlib.crc32(key).to_bytes(4, "little") != crc:
        raise BadInput(f"{field} fails its CRC-32 check (mistyped?)", field=field, allowed=DHCHAP_ALLOWED)
    return value


def make_dhchap_secret(key: bytes, hash_id: int = 0) -> str:
    """Encode a key as DHHC-1 (what `nvme gen-dhchap-key` prints); for tests and tooling."""
    return f"DHHC-1:{hash_id:02d}:{base64.b64encode(key + zlib.crc32(key).to_bytes(4, 'little')).decode()}:"


# --- misc ---------------------------------------------------------------------------------


def host_port(value: Any, field: str = "peer_listen") -> tuple[str, int]:
    """HOST:PORT (IPv6 as [addr]:port)."""
    allowed = "HOST:PORT, e.g. 127.0.0.1:7100 or [::1]:7100"
    if not isinstance(value, str):
        raise BadInput(f"{field} must be HOST:PORT", field=field, allowed=allowed)
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\[\]\s]+):(\d+)", value)
    if not m:
        raise BadInput(f"{field} {value!r} is not HOST:PORT", field=field, allowed=allowed)
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 1 <= port <= 65535:
        raise BadInput(f"{field} port {port} is out of range", field=field, allowed="1..65535")
    return host, port


def choice(value: Any, options: tuple[str, ...] | list[str], field: str) -> str:
    if value not in options:
        raise BadInput(
            f"{field} {value!r} is not one of {', '.join(options)}", field=field, allowed=list(options)
        )
    return str(value)


def drive_ids(value: Any, field: str = "drives") -> list[str] | str:
    """`all` or a comma-separated list (or a list) of drive ids, no duplicates."""
    allowed = "all, or a comma-separated list of drive ids from `nodeos drive list`"
    if value == "all":
        return "all"
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise BadInput(f"{field} must be 'all' or a list of drive ids", field=field, allowed=allowed)
    if not items or any(not v for v in items):
        raise BadInput(f"{field} has an empty drive id", field=field, allowed=allowed)
    if len(set(items)) != len(items):
        raise BadInput(f"{field} names a drive twice", field=field, allowed=allowed)
    return items


def replicas(value: Any, field: str = "replicas") -> int:
    """A replica count: 1, 2 or 3 (each copy on its own failure domain)."""
    try:
        n = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    except ValueError:
        n = None
    if n is None or not 1 <= n <= 3:
        raise BadInput(f"replicas must be 1, 2 or 3, not {value!r}", field=field, allowed=[1, 2, 3])
    return n
