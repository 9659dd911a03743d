"""Peer authentication: HMAC-SHA256 proofs of the cluster secret and per-frame session MACs.

Pure functions and one small class; the transport (transport.py) does the I/O. The secret
never crosses the wire: each side proves it by a MAC over a transcript that binds the cluster
id, both node ids and both fresh nonces, so a proof cannot be replayed elsewhere. Session keys
are derived per direction from the secret and both nonces; each frame carries a sequence
number covered by its MAC (no replay, reordering or injection).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from nodeos.rpc.framing import FrameError, pack, unpack_body

NONCE_BYTES = 32
_SEQ = struct.Struct(">Q")


def mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.digest(key, _framed(parts), "sha256")


def _framed(parts: tuple[bytes, ...]) -> bytes:
    return b"".join(_SEQ.pack(len(p)) + p for p in parts)


class _Hmac:
    """HMAC-SHA256 under one key, its padded key states hashed once (RFC 2104): a frame's MAC
    then costs two hash copies, not OpenSSL's per-call key set-up (several microseconds each,
    on every Raft message). Equal to mac(key, *parts)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        key = key.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def __call__(self, *parts: bytes) -> bytes:
        h = self._inner.copy()
        h.update(_framed(parts))
        o = self._outer.copy()
        o.update(h.digest())
        return o.digest()


def transcript(cluster: str, dialer: int, acceptor: int, dn: bytes, an: bytes) -> list[bytes]:
    return [cluster.encode(), str(dialer).encode(), str(acceptor).encode(), dn, an]


@dataclass
class Session:
    """Per-direction keys and sequence numbers of one authenticated connection."""

    send_key: bytes
    recv_key: bytes
    send_seq: int = 0
    recv_seq: int = 0
    gen: int = 0  # the generation of the cluster secret it was made with
    epoch: int = 0  # dialer: the TLS identity it was made with (PeerTransport.tls_epoch)
    peer_issuer: str | None = None  # acceptor: the CA that signed the peer's certificate

    def __post_init__(self) -> None:
        self._send_mac = _Hmac(self.send_key)
        self._recv_mac = _Hmac(self.recv_key)

    def seal(self, body: dict[str, Any]) -> bytes:
        raw = msgpack.packb(body, use_bin_type=True)
        self.send_seq += 1
        return pack({"s": self.send_seq, "b": raw, "m": self._send_mac(_SEQ.pack(self.send_seq), raw)})

    def open(self, frame: dict[str, Any]) -> dict[str, Any]:
        seq, raw, tag = frame.get("s"), frame.get("b"), frame.get("m")
        if type(seq) is not int or not isinstance(raw, bytes) or not isinstance(tag, bytes):
            raise FrameError("authenticated frame must be {s: int, b: bytes, m: bytes}")
        if seq != self.recv_seq + 1:
            raise FrameError(
                f"frame sequence {seq} out of order (expected {self.recv_seq + 1})", code="bad_auth"
            )
        if not hmac.compare_digest(tag, self._recv_mac(_SEQ.pack(seq), raw)):
            raise FrameError("frame MAC does not verify", code="bad_auth")
        self.recv_seq = seq
        return unpack_body(raw)


def session_keys(secret: bytes, dn: bytes, an: bytes, dialer: bool) -> Session:
    d2a = mac(secret, b"session d->a", dn, an)
    a2d = mac(secret, b"session a->d", dn, an)
    return Session(d2a, a2d) if dialer else Session(a2d, d2a)
