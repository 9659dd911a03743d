"""NVMe/TCP TLS pre-shared keys and the per-host TLS policy (pure).

A host's key is a configured PSK in the NVMe PSK interchange format (NVMe/TCP transport
specification 1.0c, section 3.6.1.5), what `nvme gen-tls-key` prints and what SPDK's
`nvmf_subsystem_add_host --psk` and the kernel host's `nvme connect --tls-key` take:

    NVMeTLSkey-1:<hh>:<base64(key || CRC-32 of key, little-endian)>:

`hh` names the hash that derives the retained PSK from the configured one: 00 none (the key is
used as it is: 32 or 48 bytes), 01 SHA-256 (32 bytes), 02 SHA-384 (48 bytes). The CRC-32 is
the IEEE one (zlib's). A key is checked once here and never echoed in an error.

The policy says what a host may do: `required` (TLS only: a plain-text connect is refused),
`allowed` (TLS or plain text), `off` (no key, plain text). A listener's TLS is per address and
port on both data planes (SPDK's `secure_channel`, nvmet's `addr_tsas`/`addr_treq`), never per
host, so a volume's exports follow the strictest policy among the hosts it grants
(`volume_policy`): every replica node computes the same from the same map, and a failover
never offers a host plain text that its policy refuses.

The derivation says how the host turns its configured key into the TLS PSK (both HKDF, the
labels `tls13 HostNQN` then `tls13 nvme-tls-psk`): `standard` as NVMe/TCP and RFC 8446 say
(SPDK, nvme-cli from 2.14 on), or `compat`, the form older nvme-cli/libnvme insert
(`nvme check-tls-key --insert` and `nvme connect --tls-key` of nvme-cli 2.13, Debian 13's,
measured in the lab; newer nvme-cli with `--compat`): a little-endian length and no length
bytes before label and context. Only the kernel target can serve `compat` (SPDK derives the
standard form itself).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from nodeos.errors import BadInput

Policy = Literal["required", "allowed", "off"]
POLICIES: tuple[Policy, ...] = ("required", "allowed", "off")
# A TLS listener is a port of its own (TLS is per port on both data planes): the plain one stays
# 4420, TLS 1.3 (required) listens beside it.
TLS_SVCID = "4421"
Derivation = Literal["standard", "compat"]
DERIVATIONS: tuple[Derivation, ...] = ("standard", "compat")

ALLOWED = (
    "NVMeTLSkey-1:<hash 00|01|02>:<base64 of a 32 or 48 byte key + CRC-32>: (as printed by nvme gen-tls-key)"
)
_RE = re.compile(r"NVMeTLSkey-1:(0[0-2]):([A-Za-z0-9+/]+={0,2}):")
# Key length implied by the hash; 00 (none) takes either.
_LEN = {"00": (32, 48), "01": (32,), "02": (48,)}


def check_key(value: Any, field: str = "tls_key") -> str | None:
    """A configured PSK in the interchange format (None passes). BadInput naming `field`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{field} must be a string", field=field, allowed=ALLOWED)
    m = _RE.fullmatch(value)
    if not m:
        raise BadInput(f"{field} is not an NVMe TLS key (NVMeTLSkey-1 format)", field=field, allowed=ALLOWED)
    try:
        raw = base64.b64decode(m.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise BadInput(f"{field} has invalid base64", field=field, allowed=ALLOWED) from None
    key, crc = raw[:-4], raw[-4:]
    if len(key) not in _LEN[m.group(1)]:
        raise BadInput(
            f"{field} holds a {len(key)}-byte key; hash {m.group(1)} needs "
            f"{' or '.join(map(str, _LEN[m.group(1)]))} bytes",
            field=field,
            allowed=ALLOWED,
        )
    if zlib.crc32(key).to_bytes(4, "little") != crc:
        raise BadInput(f"{field} fails its CRC-32 check (mistyped?)", field=field, allowed=ALLOWED)
    return value


def make_key(key: bytes, hash_id: int = 1) -> str:
    """`key` in the interchange format (what `nvme gen-tls-key --hmac=<hash_id>` prints)."""
    body = base64.b64encode(key + zlib.crc32(key).to_bytes(4, "little")).decode()
    return f"NVMeTLSkey-1:{hash_id:02d}:{body}:"


def generate(hash_id: int = 1) -> str:
    """A new random key: SHA-256 (32 bytes) as `nvme gen-tls-key` makes by default."""
    return make_key(os.urandom(48 if hash_id == 2 else 32), hash_id)


def check_policy(value: Any, field: str = "tls") -> Policy:
    if value not in POLICIES:
        raise BadInput(
            f"{field} {value!r} is not one of {', '.join(POLICIES)}", field=field, allowed=list(POLICIES)
        )
    return value  # type: ignore[no-any-return]


def host_policy(rec: Mapping[str, Any] | None) -> Policy:
    """A host record's policy; a record from before TLS (no `tls`) is `off`."""
    p = (rec or {}).get("tls") or "off"
    return p if p in POLICIES else "required"  # an unknown word never weakens a host


def volume_policy(granted: Iterable[str], hosts: Mapping[str, Mapping[str, Any]]) -> Policy:
    """What a volume's exports offer: `required` (TLS listeners only) once one granted host
    requires TLS; `allowed` (plain and TLS) once one has a key; else `off` (plain only)."""
    seen = {host_policy(hosts.get(h)) for h in granted}
    return "required" if "required" in seen else "allowed" if "allowed" in seen else "off"


def grant_conflicts(granted: Iterable[str], hosts: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why hosts granted together could not all connect (None: they can): a volume exported TLS
    only (a host requires it) cannot be reached by a host that has no key."""
    granted = list(granted)
    need = sorted(h for h in granted if host_policy(hosts.get(h)) == "required")
    keyless = sorted(h for h in granted if host_policy(hosts.get(h)) == "off")
    if need and keyless:
        return (
            f"host {need[0]} requires TLS, so the volume is exported over TLS only, and host "
            f"{keyless[0]} has no TLS key: give it one (`nodeos host update {keyless[0]} --tls "
            "allowed`) or grant them different volumes"
        )
    return None


def check_derivation(value: Any, field: str = "tls_derivation") -> Derivation:
    if value not in DERIVATIONS:
        raise BadInput(
            f"{field} {value!r} is not one of {', '.join(DERIVATIONS)}",
            field=field,
            allowed=list(DERIVATIONS),
        )
    return value  # type: ignore[no-any-return]


def host_derivation(rec: Mapping[str, Any] | None) -> Derivation:
    """A host record's PSK derivation; a record from before the choice (none) is `standard`."""
    d = (rec or {}).get("tls_derivation") or "standard"
    return d if d in DERIVATIONS else "standard"
