"""Bearer tokens of the HTTPS REST endpoint (nodeos/rest/): made, listed and revoked through the
console (root on a node), each with a role: `admin` (every method) or `read-only` (methods
that change nothing)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from .spec import Method, NoParams, Reply, Request

ROLES = ("admin", "read-only")
Role = Literal["admin", "read-only"]


class AuthTokenCreate(Request):
    role: Annotated[Role, Meta(description="admin: every method; read-only: methods that change nothing")]


class AuthTokenRevoke(Request):
    token_id: Annotated[
        str, Meta(min_length=1, max_length=64, pattern="^[0-9a-f]+$", description="a token id from the list")
    ]


class AuthTokenMade(Reply):
    token: Annotated[str, Meta(description="the bearer token: shown this once, kept only hashed")]
    token_id: str
    role: Role


class AuthTokenRow(Reply):
    token_id: str
    role: Role | None  # None once revoked
    revoked: bool


class AuthTokens(Reply):
    tokens: list[AuthTokenRow]


class AuthTokenRevoked(Reply):
    revoked: str


METHODS: tuple[Method, ...] = (
    Method("auth.token.create", "Make a bearer token for the REST endpoint (shown once; kept hashed).",
           AuthTokenCreate, AuthTokenMade, "leader", write=True, console="auth token create"),
    Method("auth.token.list", "The REST endpoint's tokens: id, role, when made (never the token).",
           NoParams, AuthTokens, "node", console="auth token list"),
    Method("auth.token.revoke", "Revoke a REST token: refused by every node from then on.", AuthTokenRevoke,
           AuthTokenRevoked, "leader", errors=("not_found",), write=True, console="auth token revoke"),
)  # fmt: skip
