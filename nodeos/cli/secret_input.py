"""Secrets as the console takes them: a DH-HMAC-CHAP secret from a file (or stdin), or,
discouraged, from the command line, where every user of the machine sees it in `ps` (hence the
warning, as `cluster join --token` gives); a TLS key from a file (or stdin) only."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodeos import tlskey, validate
from nodeos.errors import BadInput

WARNING = "warning: a secret on the command line is visible to every user (ps); use --dhchap-secret-file"


def dhchap_secret(secret: str | None, secret_file: str | None) -> str | None:
    """The secret of `--dhchap-secret` or `--dhchap-secret-file PATH` (- for stdin), checked;
    None when neither is given. A file's trailing newline is not part of the secret."""
    if secret is not None and secret_file is not None:
        raise BadInput(
            "give --dhchap-secret-file or --dhchap-secret, not both",
            field="dhchap_secret_file",
            allowed="one of --dhchap-secret-file PATH (or - for stdin), --dhchap-secret",
        )
    if secret is not None:
        click.echo(WARNING, err=True)
        return validate.dhchap_secret(secret, "dhchap_secret")
    if secret_file is None:
        return None
    try:
        text = sys.stdin.read() if secret_file == "-" else Path(secret_file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput(
            f"cannot read the secret file {secret_file}: {why}",
            field="dhchap_secret_file",
            allowed="a readable file holding one DHHC-1 secret (or - for stdin)",
        ) from None
    return validate.dhchap_secret(text.rstrip("\r\n"), "dhchap_secret_file")


def tls_key_file(path: str | None) -> str | None:
    """The TLS key in `--tls-key-file PATH` (- for stdin), checked; None without one. There is
    no option that takes the key itself: on the command line every user would see it (ps)."""
    if path is None:
        return None
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput(
            f"cannot read the TLS key file {path}: {why}",
            field="tls_key_file",
            allowed="a readable file holding one NVMeTLSkey-1 key (or - for stdin)",
        ) from None
    return tlskey.check_key(text.strip(), "tls_key_file")
