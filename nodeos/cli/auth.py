"""`nodeos auth token create|list|revoke`: bearer tokens of the HTTPS REST endpoint (`nodeosd
--rest-listen`, docs/api.md). A token is shown once, when it is made; the cluster keeps only
its hash, and a revoked token is refused by every node."""

from __future__ import annotations

from typing import Any

import click

from nodeos.cli.node import _client
from nodeos.cli.output import command_runner, json_option, table


@click.group()
def auth() -> None:
    """Bearer tokens of the HTTPS REST endpoint: create (admin or read-only), list, revoke."""


@auth.group()
def token() -> None:
    """The REST endpoint's bearer tokens."""


@token.command("create")
@click.option(
    "--role",
    required=True,
    type=click.Choice(["admin", "read-only"]),
    help="admin: every method; read-only: methods that change nothing.",
)
@json_option
@click.pass_context
@command_runner
def token_create(ctx: click.Context, role: str, as_json: bool) -> tuple[Any, Any]:
    """Make a token (printed once: keep it; the cluster keeps only its hash)."""
    return _client(ctx).call("auth.token.create", {"role": role}), lambda d: d["token"]


@token.command("list")
@json_option
@click.pass_context
@command_runner
def token_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """The tokens: id, role, revoked or not (never the token)."""

    def human(d: dict[str, Any]) -> str:
        rows = [
            dict(t, role=t["role"] or "-", state="revoked" if t["revoked"] else "live") for t in d["tokens"]
        ]
        return table(rows, ["token_id", "role", "state"]) if rows else "no REST tokens"

    return _client(ctx).call("auth.token.list", {}), human


@token.command("revoke")
@click.argument("token_id")
@json_option
@click.pass_context
@command_runner
def token_revoke(ctx: click.Context, token_id: str, as_json: bool) -> tuple[Any, Any]:
    """Revoke a token by its id (from `nodeos auth token list`)."""
    out = _client(ctx).call("auth.token.revoke", {"token_id": token_id})
    return out, lambda d: f"REST token {d['revoked']} revoked"
