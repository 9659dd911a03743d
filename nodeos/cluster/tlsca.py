"""The cluster's own certificate authority and each member's TLS identity (mutual TLS).

`cluster init` makes the CA (an EC P-256 key that never leaves that node) and the node's own
key and certificate; `cluster rotate-ca` makes a new one on the member it runs on (the map's
`ca.holder`). A joining node makes its key and sends only a certificate request; the CA's node
signs it for `node-<raft id>` and returns the certificate with the CA's. Keys never leave the
node that made them. Files live in `<state-dir>/cluster/tls/` (0600).

Peer connections are TLS 1.3 with the cluster CA as the only trust anchor; the acceptor asks
for a client certificate but lets a joining node (which has none yet) in, and the transport
then allows it only to ask to join (nodeos/cluster/transport.py). The HMAC handshake inside
still proves the cluster secret (or the join token). `cluster rotate-ca` replaces the CA and
every certificate (nodeos/cluster/carotation.py; its staged files are named below).
"""

from __future__ import annotations

import datetime
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeos.errors import BadInput

VALID_DAYS = 3650  # the cluster's lifetime; rotation is a re-key, not an expiry to babysit


def node_cn(raft_id: int) -> str:
    return f"node-{raft_id}"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(cn: str, cluster_id: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, cluster_id),
        ]
    )


def make_ca(cluster_id: str, gen: int = 0) -> tuple[bytes, bytes]:
    """(CA key PEM, CA certificate PEM). A rotated CA's name carries its generation, so a
    certificate's issuer says which CA signed it."""
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    name = _name(f"nodeos cluster CA {cluster_id}" + (f" g{gen}" if gen else ""), cluster_id)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)


def make_request(raft_id: int, cluster_id: str) -> tuple[bytes, bytes]:
    """(node key PEM, certificate signing request PEM): the key stays here."""
    key = _key()
    csr = x509.CertificateSigningRequestBuilder().subject_name(_name(node_cn(raft_id), cluster_id))
    return _key_pem(key), csr.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def sign_request(ca_key_pem: bytes, ca_cert_pem: bytes, csr_pem: bytes, raft_id: int) -> bytes:
    """A certificate for `node-<raft_id>` (whatever name the request asked for) on the request's key."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError:
        raise BadInput("csr is not a PEM certificate request", field="csr") from None
    if not csr.is_signature_valid:
        raise BadInput("csr signature does not verify", field="csr")
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    cluster_id = ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(node_cn(raft_id), str(cluster_id)))
        .issuer_name(ca_cert.subject)
        .public_key(csr.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def cert_fp(pem: bytes) -> bytes:
    """A certificate's fingerprint (SHA-256 of its DER, first 16 bytes): public, for the map."""
    return x509.load_pem_x509_certificate(pem).fingerprint(hashes.SHA256())[:16]


def issued_by(cert_pem: bytes, ca_pem: bytes, key_pem: bytes | None = None) -> bool:
    """Whether `cert_pem` is signed by the CA `ca_pem` (and, given, is for the key `key_pem`)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return key_pem is None or key_matches(cert_pem, key_pem)


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether `key_pem` is the private key of the certificate `cert_pem`."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    return bool(cert.public_key().public_bytes(enc, pub) == key.public_key().public_bytes(enc, pub))


def issuer_cn(peercert: dict | None) -> str | None:  # type: ignore[type-arg]
    """The issuer CN of a verified peer certificate (ssl's getpeercert() form)."""
    for rdn in (peercert or {}).get("issuer", ()):
        for k, v in rdn:
            if k == "commonName":
                return str(v)
    return None


def subject_cns(pem: bytes) -> set[str]:
    """The subject CNs of every certificate in a PEM bundle."""
    return {
        str(c.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
        for c in x509.load_pem_x509_certificates(pem)
    }


@dataclass(frozen=True)
class TlsFiles:
    """A member's TLS material on disk."""

    dir: Path

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def key(self) -> Path:
        return self.dir / "node.key"

    @property
    def cert(self) -> Path:
        return self.dir / "node.pem"

    # A CA roll's staged files (nodeos/cluster/carotation.py): the new CA certificate (trusted
    # beside ca.pem), this node's new key and certificate, and on the CA's node the new CA key.
    @property
    def ca_new(self) -> Path:
        return self.dir / "ca-new.pem"

    @property
    def key_new(self) -> Path:
        return self.dir / "node-new.key"

    @property
    def cert_new(self) -> Path:
        return self.dir / "node-new.pem"

    @property
    def ca_key_new(self) -> Path:
        return self.dir / "ca-new.key"

    def trust_pem(self) -> bytes:
        """Every CA this node trusts: ca.pem, and during a CA roll the new CA too."""
        extra = self.ca_new.read_bytes() if self.ca_new.exists() else b""
        return self.ca_cert.read_bytes() + extra

    def trusted_cns(self) -> set[str]:
        return subject_cns(self.trust_pem())

    def remove(self, *paths: Path) -> None:
        for p in paths:
            p.unlink(missing_ok=True)

    def present(self) -> bool:
        return self.ca_cert.exists() and self.key.exists() and self.cert.exists()

    def is_ca(self) -> bool:
        return self.ca_key.exists()

    def write(self, name: str, data: bytes) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.dir / name
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def server_context(self, new: bool = False) -> ssl.SSLContext:
        """`new`: present the certificate of a CA roll (after its switch)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(*((self.cert_new, self.key_new) if new else (self.cert, self.key)))
        ctx.load_verify_locations(cadata=self.trust_pem().decode())
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a joining node has no certificate yet
        return ctx

    def client_context(self, new: bool = False) -> ssl.SSLContext:
        cert, key = (self.cert_new, self.key_new) if new else (self.cert, self.key)
        return client_context(self.trust_pem(), cert, key)


def client_context(ca_pem: bytes, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Trusts only the cluster CA; names are checked by node id after the handshake."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False  # peers are addressed by IP; the certificate's CN is checked instead
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=ca_pem.decode())
    if cert is not None and key is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def peer_cn(peercert: dict | None) -> str | None:  # type: ignore[type-arg]
    """The CN of a verified peer certificate (ssl's getpeercert() form)."""
    for rdn in (peercert or {}).get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                return str(v)
    return None
