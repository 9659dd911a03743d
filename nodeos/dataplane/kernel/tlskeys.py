"""TLS PSKs for the kernel target (nvmet-tcp), in the kernel's `.nvme` keyring.

nvmet-tcp hands a TLS handshake on a port with `addr_tsas` tls1.3 to `tlshd` (ktls-utils), which
looks the host's PSK up in the `.nvme` keyring by the identity the host sends (NVMe/TCP 1.0,
section 3.6.1.3, identity version 0):

    NVMe0R<hh> <host NQN> <subsystem NQN>      hh: 01 SHA-256 (32-byte key), 02 SHA-384 (48)

The key stored under it (type `psk`) is the TLS PSK itself, derived from the configured key
(the interchange key the operator holds) in two HKDF steps (extract with an empty salt, then
expand with a TLS 1.3 style label), as SPDK's nvme_tcp.h and libnvme do:

    retained = HKDF(configured, info = len || "tls13 HostNQN" || host NQN)   (hash 00: configured)
    tls_psk  = HKDF(retained,   info = len || "tls13 nvme-tls-psk" || identity)

`compat` (tlskey.py: older nvme-cli) derives the same two steps with another HKDF info:
little-endian `len`, then label and context with no length bytes before them.

So a key exists per (host, subsystem). Nothing here is ever logged; the payload goes to the
kernel through add_key(2) (never a command line).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import re
import struct
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos.tlskey import Derivation, check_key

KEYRING = ".nvme"
KEY_TYPE = "psk"
_HASH = {32: hashes.SHA256, 48: hashes.SHA384}


def _hkdf(key: bytes, label: str, context: str, length: int, derivation: Derivation = "standard") -> bytes:
    if derivation == "compat":
        info = struct.pack("<H", length) + label.encode() + context.encode()
    else:
        info = struct.pack(">H", length) + bytes([len(label)]) + label.encode()
        info += bytes([len(context)]) + context.encode()
    return HKDF(algorithm=_HASH[length](), length=length, salt=b"", info=info).derive(key)


def configured(key: str) -> tuple[bytes, str]:
    """The configured PSK in an interchange key and its hash (00, 01, 02)."""
    check_key(key)
    _, hh, body, _ = key.split(":")
    return base64.b64decode(body)[:-4], hh


def identity(host: str, subnqn: str, key_len: int) -> str:
    return f"NVMe0R{'01' if key_len == 32 else '02'} {host} {subnqn}"


def retained_key(key: str, host: str, derivation: Derivation = "standard") -> bytes:
    """The retained PSK of `host` for the interchange `key` (hash 00: the configured key itself)."""
    raw, hh = configured(key)
    return raw if hh == "00" else _hkdf(raw, "tls13 HostNQN", host, len(raw), derivation)


def tls_psk(key: str, host: str, subnqn: str, derivation: Derivation = "standard") -> tuple[str, bytes]:
    """(identity, TLS PSK) of `host` on subsystem `subnqn` for the interchange `key` (pure)."""
    raw, _ = configured(key)
    retained = retained_key(key, host, derivation)
    ident = identity(host, subnqn, len(raw))
    return ident, _hkdf(retained, "tls13 nvme-tls-psk", ident, len(raw), derivation)


# --- the keyring (edge) --------------------------------------------------------------------

_SYS_ADD_KEY = 248  # x86_64
_SYS_KEYCTL = 250
_KEYCTL_SEARCH = 10
_KEYCTL_INVALIDATE = 21


class Keyring:
    """The kernel's `.nvme` keyring (the nvme modules make it), through add_key(2)/keyctl(2)."""

    def __init__(self, proc_keys: Path = Path("/proc/keys")) -> None:
        self.proc_keys = proc_keys
        name = ctypes.util.find_library("c")
        self._libc = ctypes.CDLL(name, use_errno=True)

    def serial(self) -> int:
        try:
            text = self.proc_keys.read_text()
        except OSError as exc:
            raise EnvironmentProblem(f"cannot read {self.proc_keys}: {exc.strerror}") from None
        for line in text.splitlines():
            # "<serial hex> <flags> <usage> <timeout> <perm> <uid> <gid> keyring  .nvme: <n>"
            m = re.match(r"([0-9a-f]+) .* keyring\s+\.nvme:", line)
            if m:
                return int(m.group(1), 16)
        raise EnvironmentProblem(
            "the kernel has no .nvme keyring (nvme-fabrics / nvmet-tcp without TLS, or not loaded): "
            "TLS on the kernel target needs CONFIG_NVME_TARGET_TCP_TLS and tlshd"
        )

    def put(self, ident: str, payload: bytes) -> None:
        """Add (or update: same type and description) the key `ident`."""
        libc = self._libc
        libc.syscall.restype = ctypes.c_long
        rc = libc.syscall(
            _SYS_ADD_KEY,
            KEY_TYPE.encode(),
            ident.encode(),
            ctypes.c_char_p(payload),
            ctypes.c_size_t(len(payload)),
            ctypes.c_int32(self.serial()),
        )
        if rc < 0:
            err = ctypes.get_errno()
            what = ident.split(" ")[0]
            raise OperationFailed(f"the kernel refused TLS key {what} (errno {err})", field="tls_key")

    def drop(self, ident: str) -> None:
        """Invalidate the key `ident` if the keyring holds it."""
        libc = self._libc
        libc.syscall.restype = ctypes.c_long
        found = libc.syscall(
            _SYS_KEYCTL, _KEYCTL_SEARCH, ctypes.c_int32(self.serial()), KEY_TYPE.encode(), ident.encode(), 0
        )
        if found > 0:
            libc.syscall(_SYS_KEYCTL, _KEYCTL_INVALIDATE, ctypes.c_int32(found))
