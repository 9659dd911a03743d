"""`nodeos host ...`: hosts (GPU nodes) by host NQN, their DH-HMAC-CHAP secrets and NVMe/TCP TLS
(nodeos/tlskey.py). A pure client of the API (host.add, host.update, host.list, host.remove)."""

from __future__ import annotations

from typing import Any

import click

from nodeos import tlskey, validate
from nodeos.cli import secret_input
from nodeos.cli.node import _client
from nodeos.cli.output import command_runner, json_option, table
from nodeos.errors import BadInput

TLS_HELP = (
    "NVMe/TCP TLS: required (TLS only; the default of a bare --tls), allowed (TLS or plain text) "
    "or off. Without --tls-key-file the appliance makes the key and shows it once."
)
KEY_FILE_HELP = "Read the host's TLS key (NVMeTLSkey-1:..., `nvme gen-tls-key`) from a file (- for stdin)."


def tls_option(f: Any) -> Any:
    return click.option(
        "--tls",
        "tls",
        type=click.Choice(tlskey.POLICIES),
        is_flag=False,
        flag_value="required",
        default=None,
        help=TLS_HELP,
    )(f)


DERIVATION_HELP = (
    "How the host derives its TLS PSK from the key: standard (SPDK; nvme-cli 2.14 and later) or "
    "compat (nvme-cli 2.13 and older, e.g. Debian 13's: kernel data plane only). Default standard."
)


def derivation_option(f: Any) -> Any:
    return click.option(
        "--tls-derivation",
        "tls_derivation",
        type=click.Choice(tlskey.DERIVATIONS),
        default=None,
        help=DERIVATION_HELP,
    )(f)


def _shown_once(r: dict[str, Any]) -> str:
    """The key the appliance made, said once: it is never shown again."""
    if not r.get("tls_key"):
        return ""
    return (
        f"\nTLS key (shown once, never again; keep it on the host only, e.g. in a 0600 file for "
        f"`nvme connect --tls --tls-key=...` or the .nvme keyring):\n{r['tls_key']}"
    )


@click.group()
def host() -> None:
    """Hosts (GPU nodes) by host NQN."""


@host.command("add")
@click.argument("hostnqns", nargs=-1, required=True)
@click.option(
    "--dhchap-secret-file",
    default=None,
    metavar="PATH",
    help="Read the DH-HMAC-CHAP secret from a file (- for stdin).",
)
@click.option(
    "--dhchap-secret",
    default=None,
    help="The DH-HMAC-CHAP secret itself (visible in ps: prefer --dhchap-secret-file).",
)
@tls_option
@click.option("--tls-key-file", default=None, metavar="PATH", help=KEY_FILE_HELP)
@derivation_option
@json_option
@click.pass_context
@command_runner
def host_add(
    ctx: click.Context,
    hostnqns: tuple[str, ...],
    dhchap_secret: str | None,
    dhchap_secret_file: str | None,
    tls: str | None,
    tls_key_file: str | None,
    tls_derivation: str | None,
    as_json: bool,
) -> tuple[Any, Any]:
    """Register hosts by NQN (one with an optional DH-HMAC-CHAP secret and TLS, or several
    without: one change for all of them)."""
    if tls_key_file is not None and tls == "off":
        raise BadInput("a TLS key file with --tls off", field="tls", allowed=["required", "allowed"])
    secret = secret_input.dhchap_secret(dhchap_secret, dhchap_secret_file)
    if len(hostnqns) > 1:
        per_host = (("dhchap_secret", secret), ("tls", tls), ("tls_key_file", tls_key_file))
        for field, v in (*per_host, ("tls_derivation", tls_derivation)):
            if v is not None:
                raise BadInput(f"{field} is per host: add such hosts one at a time", field=field)
        nqns = [validate.host_nqn(h, "host") for h in hostnqns]
        r = _client(ctx).call("host.add", {"nqns": nqns})
        return r, f"{r['added']} hosts added" + (
            f", {r['present']} already registered" if r["present"] else ""
        )
    params: dict[str, Any] = {"nqn": validate.host_nqn(hostnqns[0], "host"), "dhchap_secret": secret}
    key = secret_input.tls_key_file(tls_key_file)
    if tls is not None:
        params["tls"] = tls
    if key is not None:
        params["tls_key"] = key
    if tls_derivation is not None:
        params["tls_derivation"] = tls_derivation
    r = _client(ctx).call("host.add", params)
    how = ["DH-HMAC-CHAP"] if r.get("dhchap") else []
    how += [f"TLS {r['tls']}"] if r.get("tls") not in (None, "off") else []
    how += [f"{r['tls_derivation']} PSK derivation"] if r.get("tls_derivation") == "compat" else []
    return r, f"host {hostnqns[0]} added" + (f" with {' and '.join(how)}" if how else "") + _shown_once(r)


@host.command("update")
@click.argument("hostnqn")
@tls_option
@click.option("--tls-key-file", default=None, metavar="PATH", help=KEY_FILE_HELP)
@click.option("--new-tls-key", is_flag=True, help="The appliance makes a new TLS key (shown once).")
@derivation_option
@json_option
@click.pass_context
@command_runner
def host_update(
    ctx: click.Context,
    hostnqn: str,
    tls: str | None,
    tls_key_file: str | None,
    new_tls_key: bool,
    tls_derivation: str | None,
    as_json: bool,
) -> tuple[Any, Any]:
    """Change a host's TLS: its policy, or its key (a file, or a new one the appliance makes).
    Every storage node exporting a volume to the host applies it."""
    if tls_key_file is not None and new_tls_key:
        raise BadInput("give --tls-key-file or --new-tls-key, not both", field="tls_key_file")
    params: dict[str, Any] = {"nqn": validate.host_nqn(hostnqn, "host")}
    key = secret_input.tls_key_file(tls_key_file)
    if tls is not None:
        params["tls"] = tls
    if key is not None:
        params["tls_key"] = key
    if new_tls_key:
        params["new_tls_key"] = True
    if tls_derivation is not None:
        params["tls_derivation"] = tls_derivation
    if len(params) == 1:
        raise BadInput(
            "nothing to change: give --tls POLICY, --tls-key-file, --new-tls-key or --tls-derivation",
            field="tls",
            allowed=list(tlskey.POLICIES),
        )
    r = _client(ctx).call("host.update", params)
    said = "unchanged" if not r.get("changed") else "updated"
    how = f", {r['tls_derivation']} PSK derivation" if r.get("tls_derivation") == "compat" else ""
    return r, f"host {hostnqn}: TLS {r.get('tls')}{how} ({said})" + _shown_once(r)


@host.command("list")
@json_option
@click.pass_context
@command_runner
def host_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List registered hosts and the volumes granted to them (secrets never shown)."""

    def human(rows: list[dict[str, Any]]) -> str:
        view = [
            dict(
                r,
                dhchap="yes" if r.get("dhchap") else "no",
                tls=r.get("tls") or "off",
                volumes=",".join(r.get("volumes") or []) or "-",
            )
            for r in rows
        ]
        return table(view, ["nqn", "dhchap", "tls", "volumes"])

    return _client(ctx).call("host.list"), human


@host.command("remove")
@click.argument("hostnqn")
@json_option
@click.pass_context
@command_runner
def host_remove(ctx: click.Context, hostnqn: str, as_json: bool) -> tuple[Any, Any]:
    """Forget a host (it must have no grants left)."""
    r = _client(ctx).call("host.remove", {"nqn": validate.host_nqn(hostnqn, "host")})
    return r, f"host {hostnqn} removed"
