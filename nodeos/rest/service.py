"""The REST service: the `auth.token.*` methods (bearer tokens, kept hashed in the cluster map)
and, when `rest_listen` is set, the HTTPS endpoint that serves every API method from its
definition (nodeos/api/openapi.py) through the daemon's one dispatcher: the same checks, the
same handlers, the same error codes as the console."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec

from nodeos import validate
from nodeos.api import openapi
from nodeos.daemon.service import DaemonContext, Handler
from nodeos.errors import NotFound, OperationFailed

from . import tokens
from .server import CertFiles, RestServer, error_body

LOG = logging.getLogger("nodeosd.rest")


# What the daemon's own framing (msgpack) carries: JSON may hold wider integers, which then failed
# where a request is forwarded to the leader or proposed (a 5xx, and the follower's connection
# to the leader dropped): refused at the door instead, whatever field holds them.
INT_MIN, UINT_MAX = -(2**63), 2**64 - 1


def _fits_64_bits(v: Any) -> bool:
    todo = [v]  # a loop, not recursion: a body may nest as deep as the decoder allows
    while todo:
        x = todo.pop()
        if isinstance(x, int) and not INT_MIN <= x <= UINT_MAX:
            return False
        if isinstance(x, dict):
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return True


class RestService:
    name = "rest"

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self.server: RestServer | None = None
        self.error: str | None = None
        self.routes = openapi.routes()
        self._doc: bytes | None = None
        self.refused = {"unauthorized": 0, "forbidden": 0}

    def methods(self) -> dict[str, Handler]:
        return {
            "auth.token.create": self.token_create,
            "auth.token.list": self.token_list,
            "auth.token.revoke": self.token_revoke,
        }

    # --- tokens -----------------------------------------------------------------------------

    def _cluster(self) -> Any:
        cluster = self.ctx.services.get("cluster")
        if cluster is None or getattr(cluster, "driver", None) is None:
            raise OperationFailed("the cluster service is not running on this node", field="cluster")
        return cluster

    def _records(self) -> dict[str, str]:
        kv = self._cluster().driver.map.state["kv"]
        return {k[len(tokens.PREFIX) :]: v["value"] for k, v in kv.items() if k.startswith(tokens.PREFIX)}

    async def token_create(self, params: dict[str, Any]) -> dict[str, Any]:
        token, token_id, record = tokens.new_token(params["role"])
        await self._cluster().api_kv_put({"key": tokens.key_of(token_id), "value": record})
        LOG.info("REST token %s made (%s)", token_id, params["role"])
        return {"token": token, "token_id": token_id, "role": params["role"]}

    async def token_list(self, params: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for token_id, rec in sorted(self._records().items()):
            revoked = rec == tokens.REVOKED
            rows.append({"token_id": token_id, "role": None if revoked else str(rec).split(":")[0],
                         "revoked": revoked})  # fmt: skip
        return {"tokens": rows}

    async def token_revoke(self, params: dict[str, Any]) -> dict[str, Any]:
        token_id = params["token_id"]
        recs = self._records()
        if recs.get(token_id) in (None, tokens.REVOKED):
            live = sorted(k for k, v in recs.items() if v != tokens.REVOKED)
            raise NotFound(f"no live REST token {token_id}", field="token_id", allowed=live or None)
        await self._cluster().api_kv_put({"key": tokens.key_of(token_id), "value": tokens.REVOKED})
        LOG.info("REST token %s revoked", token_id)
        return {"revoked": token_id}

    def _role(self, bearer: str | None) -> str | None:
        token_id = tokens.token_id_of(bearer or "")
        if token_id is None:
            return None
        d = getattr(self.ctx.services.get("cluster"), "driver", None)
        return None if d is None else tokens.role_of(bearer or "", d.map.kv_get(tokens.key_of(token_id)))

    # --- HTTPS ------------------------------------------------------------------------------

    async def handle(self, verb: str, path: str, body: bytes, bearer: str | None) -> tuple[int, bytes]:
        if path == openapi.BASE + "/openapi.json" and verb in ("GET", "HEAD"):
            if self._doc is None:
                self._doc = msgspec.json.encode(openapi.document())
            return 200, self._doc
        m = self.routes.get(path[len(openapi.BASE) :]) if path.startswith(openapi.BASE + "/") else None
        if m is None:
            return 404, error_body("not_found", f"no route {path}", field="path")
        if verb != "POST" and not (verb == "GET" and openapi.takes_get(m)):
            return 405, error_body("method_not_allowed", f"{path} takes POST", field="method")
        role = self._role(bearer)
        if role is None:
            self.refused["unauthorized"] += 1
            return 401, error_body("unauthorized", "a valid bearer token is required", field="authorization")
        if not tokens.allows(role, m.write):
            self.refused["forbidden"] += 1
            return 403, error_body("forbidden", f"{m.name} changes state: it needs an admin token",
                                   field="authorization", allowed=["admin"])  # fmt: skip
        params: Any = {}
        if body:  # absent: no parameters; present, it is JSON (whitespace alone is not)
            try:
                params = msgspec.json.decode(body)
            except (msgspec.DecodeError, RecursionError):  # too deep: msgspec says so by RecursionError
                return 400, error_body("bad_input", "the request body is not JSON", field="body")
            if not isinstance(params, dict):
                return 400, error_body("bad_input", "the request body must be a JSON object", field="body")
            wide = next((k for k, v in params.items() if not _fits_64_bits(v)), None)
            if wide is not None:
                where = wide or "body"  # a field named "" is still somewhere to point at
                return 400, error_body(
                    "bad_input", f"{where}: an integer does not fit in 64 bits", field=where,
                    allowed=f"integers from {INT_MIN} to {UINT_MAX}",
                )  # fmt: skip
        assert self.ctx.dispatch is not None
        reply = await self.ctx.dispatch(m.name, params)
        if "error" in reply:
            err = dict(reply["error"])
            code = "internal" if str(err.get("message", "")).startswith("internal error") else err["code"]
            return openapi.status_of(code), _json({"error": err})
        return 200, _json(reply.get("result"))

    # --- Service protocol -------------------------------------------------------------------

    async def start(self) -> None:
        listen = self.ctx.config.get("rest_listen")
        if not listen:
            return
        host, port = validate.host_port(listen, "rest_listen")
        cert, key = self.ctx.config.get("rest_cert"), self.ctx.config.get("rest_key")
        if not cert:  # the node's certificate from the cluster CA (nodeos/cluster/tlsca.py)
            tls = getattr(self.ctx.services.get("cluster"), "tls", None)
            cert, key = (str(tls.cert), str(tls.key)) if tls is not None else (None, None)
        try:
            if not cert or not key or not Path(cert).exists():
                raise OSError(
                    "no certificate: the cluster's TLS identity is missing (set rest_cert and rest_key)"
                )
            self.server = RestServer(host, port, CertFiles(str(cert), str(key)), self.handle)
            self.server.start()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self.server = None
            self.error = f"cannot serve HTTPS on {listen}: {exc}"
            LOG.error("REST endpoint off: %s", self.error)
            return
        LOG.info("REST endpoint on https://%s:%d%s", host, self.server.port, openapi.BASE)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

    def status(self) -> dict[str, Any] | None:
        if not self.ctx.config.get("rest_listen"):
            return None  # off: nothing in `nodeos status` (its lines stay as they were)
        s = self.server
        return {
            "listen": f"{s.host}:{s.port}" if s is not None else self.ctx.config.get("rest_listen"),
            "error": self.error,
            "requests": s.requests if s is not None else 0,
            "refused": dict(self.refused),
        }


def _json(obj: Any) -> bytes:
    return msgspec.json.encode(obj)


def create_service(ctx: DaemonContext) -> RestService:
    return RestService(ctx)
