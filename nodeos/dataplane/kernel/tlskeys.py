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

Identity version 1 (NVMe/TCP 1.0c, TP8018; `nvme check-tls-key --identity=1`, what some vendors'
guides use) ends in a digest of the retained key, and that digest is the TLS PSK's context:

    NVMe1R<hh> <host NQN> <subsystem NQN> <base64(HMAC(retained, host " " subsystem " NVMe-over-Fabrics"))>
    tls_psk  = HKDF(retained,   info = len || "tls13 nvme-tls-psk" || "<hh> <digest>")

The host picks which identity it offers, so both are put under their own names (`tls_psks`).
So a key exists per (host, subsystem). Nothing here is ever logged; the payload goes to the
kernel through add_key(2) (never a command line).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import hashlib
import hmac
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
_HASH_LIB = {32: hashlib.sha256, 48: hashlib.sha384}


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


def identity_v1_prefix(host: str, subnqn: str, key_len: int) -> str:
    """What every version-1 identity of `host` on `subnqn` starts with (its digest follows)."""
    return f"NVMe1R{'01' if key_len == 32 else '02'} {host} {subnqn} "


def tls_psk_v1(key: str, host: str, subnqn: str, derivation: Derivation = "standard") -> tuple[str, bytes]:
    """(identity version 1, its TLS PSK): the identity ends in the retained key's digest (pure)."""
    raw, _ = configured(key)
    retained = retained_key(key, host, derivation)
    hh = "01" if len(raw) == 32 else "02"
    mac = hmac.new(retained, f"{host} {subnqn} NVMe-over-Fabrics".encode(), _HASH_LIB[len(raw)])
    digest = base64.b64encode(mac.digest()).decode()
    ident = identity_v1_prefix(host, subnqn, len(raw)) + digest
    return ident, _hkdf(retained, "tls13 nvme-tls-psk", f"{hh} {digest}", len(raw), derivation)


def tls_psks(
    key: str, host: str, subnqn: str, derivation: Derivation = "standard"
) -> list[tuple[str, bytes]]:
    """Both identities' TLS PSKs: the host offers the one its nvme-cli inserted (pure)."""
    return [tls_psk(key, host, subnqn, derivation), tls_psk_v1(key, host, subnqn, derivation)]


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

    def drop_prefix(self, prefix: str, keep: str | None = None) -> None:
        """Invalidate every `psk` key whose identity starts with `prefix` but `keep` (a version-1
        identity ends in a digest of the key: an old key's stays behind under another name)."""
        try:
            text = self.proc_keys.read_text()
        except OSError as exc:
            raise EnvironmentProblem(f"cannot read {self.proc_keys}: {exc.strerror}") from None
        for serial, ident in psk_keys(text):
            if ident.startswith(prefix) and ident != keep:
                self._libc.syscall.restype = ctypes.c_long
                self._libc.syscall(_SYS_KEYCTL, _KEYCTL_INVALIDATE, ctypes.c_int32(serial))


def psk_keys(proc_keys: str) -> list[tuple[int, str]]:
    """(serial, identity) of each `psk` key in /proc/keys' text (pure)."""
    out = []
    for line in proc_keys.splitlines():
        # "<serial hex> <flags> <usage> <timeout> <perm> <uid> <gid> psk  <identity>: <len>"
        parts = line.split(None, 8)
        if len(parts) == 9 and parts[7] == KEY_TYPE:
            out.append((int(parts[0], 16), parts[8].rsplit(": ", 1)[0]))
    return out
