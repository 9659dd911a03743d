"""schemathesis against the OpenAPI document a real nodeosd serves: every route, generated
requests, zero 5xx, no response outside its schema, every 4xx naming its field
(tests/process/rest_fuzz_hooks.py). The routes that reshape a cluster (leave, remove, init,
re-keying) or mint tokens are fuzzed on a daemon of their own, a cluster of one (RESHAPING);
the two that reach outside the daemon (binding PCI devices, dialling an address) are not
fuzzed: their checks are in test_drive_claim.py, test_rest_api.py and the cluster tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Daemon
from .test_rest_api import _free_port, make_token

pytestmark = pytest.mark.process
pytest.importorskip("schemathesis")

EXCLUDED = (
    r"^/(drive/(claim|release)|cluster/(join|init|leave|remove|ca/rotate|secret/rotate)"
    r"|auth/token/(create|revoke))$"
)
# Fuzzed alone, on a daemon that is a cluster of one: through a cluster they would take members
# away from the run (leave, remove) or stall it (re-keying every member).
RESHAPING = r"^/(auth/token/(create|revoke)|cluster/(init|leave|remove|ca/rotate|secret/rotate))$"
EXAMPLES = int(os.environ.get("NODEOS_REST_FUZZ_EXAMPLES", "5"))  # per route; the CI's budget
# schemathesis's whole run, seconds: 60 examples a route through a cluster take 20-30 min beside other work.
TIMEOUT_S = int(os.environ.get("NODEOS_REST_FUZZ_TIMEOUT", "900"))


def operator_certificate(dir: Path) -> tuple[Path, Path, Path]:
    """(CA, certificate for 127.0.0.1, its key): an operator's own, as `rest_cert`/`rest_key`."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey,
             ca: bool) -> x509.Certificate:  # fmt: skip
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            b = b.add_extension(san, critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    paths = dir / "ca.pem", dir / "rest.pem", dir / "rest.key"
    paths[0].write_bytes(cert("operator CA", ca_key, "operator CA", ca_key, True).public_bytes(pem))
    paths[1].write_bytes(cert("127.0.0.1", key, "operator CA", ca_key, False).public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def run_schemathesis(
    url: str, ca: Path, token: str, cwd: Path, examples: int = EXAMPLES, only: str | None = None
) -> None:
    """schemathesis over every route but EXCLUDED at `url` (the OpenAPI document), or over the
    routes `only` matches; fails the test with schemathesis's own report of what broke."""
    project = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.process.rest_fuzz_hooks", "PYTHONPATH": str(project)}
    r = subprocess.run(
        [
            str(Path(sys.executable).parent / "schemathesis"),
            "run",
            url,
            "--tls-verify",
            str(ca),  # an operator's certificate names the address: hostnames are checked
            "-H",
            f"Authorization: Bearer {token}",
            "--max-examples",
            str(examples),
            "--request-timeout",
            "40",
            *(("--include-path-regex", only) if only else ("--exclude-path-regex", EXCLUDED)),
            "--workers",
            "2",
            "--phases",
            "fuzzing",
            "--checks",
            "all",
            # A generated request the schema admits but a validator refuses (a size under 1 MiB
            # written as text, say) is a 400 naming its field, not a failure of the API.
            "--exclude-checks",
            "positive_data_acceptance",
            "--seed",
            "26",
        ],
        cwd=cwd,  # schemathesis keeps a cache (.schemathesis/) where it runs
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    print("\nschemathesis:", r.stdout[-2500:])  # its summary: requests made, checks passed (`-s`)


def rest_config(dir: Path, port: int) -> tuple[Path, Path]:
    """(a config file serving REST on 127.0.0.1:port with an operator's certificate, its CA)."""
    ca, cert, key = operator_certificate(dir)
    config = dir / "nodeosd.toml"
    config.write_text(f'rest_listen = "127.0.0.1:{port}"\nrest_cert = "{cert}"\nrest_key = "{key}"\n')
    return config, ca


def test_generated_requests_get_no_5xx_and_answers_keep_their_schema(tmp_path: Path) -> None:
    port = _free_port()
    config, ca = rest_config(tmp_path, port)
    d = Daemon(tmp_path, extra=["--config", str(config)])
    d.start()
    try:
        token = make_token(d, "admin")
        run_schemathesis(f"https://127.0.0.1:{port}/api/v1/openapi.json", ca, token, tmp_path)
        assert token.split("_", 2)[2] not in d.log.read_text()
    finally:
        d.stop()


def test_the_routes_that_reshape_a_cluster_fuzzed_on_a_daemon_of_their_own(tmp_path: Path) -> None:
    port = _free_port()
    config, ca = rest_config(tmp_path, port)
    d = Daemon(tmp_path, extra=["--config", str(config)])
    d.start()
    try:
        token = make_token(d, "admin")
        run_schemathesis(f"https://127.0.0.1:{port}/api/v1/openapi.json", ca, token, tmp_path, only=RESHAPING)
        assert token.split("_", 2)[2] not in d.log.read_text()
    finally:
        d.stop()
