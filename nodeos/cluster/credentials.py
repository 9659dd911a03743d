"""A member's credentials: its mutual-TLS identity and the join tokens it issues.

Part of ClusterService (nodeos/cluster/service.py). The member holding the cluster CA
(nodeos/cluster/tlsca.py: the one that ran `cluster init` or the last `cluster rotate-ca`, the
map's `ca.holder`) issues join tokens (nodeos/cluster/token.py),
kept in its own 0600 state (`meta`, key `join_tokens`) until they expire or are revoked.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import TYPE_CHECKING, Any

from nodeos.cluster import datakey, secretroll, tlsca
from nodeos.cluster import token as tokens
from nodeos.cluster.leader_ops import str_param
from nodeos.cluster.token_map import uses_of
from nodeos.errors import BadInput, NotFound

if TYPE_CHECKING:
    from nodeos.cluster.driver import RaftDriver

log = logging.getLogger("nodeosd.cluster")
TOKENS_KEY = "join_tokens"  # join tokens this node issued: id hex -> {key, expires, created}


class MemberCredentials:
    """Mixin of ClusterService: the attributes below are the service's."""

    tls: tlsca.TlsFiles
    meta: Any
    advertise: str
    identity: dict[str, Any] | None
    driver: RaftDriver | None

    if TYPE_CHECKING:  # provided by ClusterService

        def _member(self) -> dict[str, Any]: ...

        def ca_roll_under_way(self) -> bool: ...

        def ca_holder(self) -> int | None: ...

    def _tls_contexts(self) -> dict[str, Any]:
        if not self.tls.present():
            log.warning("this member has no TLS identity (made before TLS): peer traffic is not encrypted")
            return {}
        new = bool((self.identity or {}).get("tls_new"))  # a CA roll's switch: the new certificate
        return {"tls_server": self.tls.server_context(new), "tls_client": self.tls.client_context(new)}

    def _make_tls(self, cluster_id: str, raft_id: int) -> None:
        """The cluster CA and this node's certificate (cluster init)."""
        shutil.rmtree(self.tls.dir, ignore_errors=True)
        ca_key, ca_cert = tlsca.make_ca(cluster_id)
        key, csr = tlsca.make_request(raft_id, cluster_id)
        self.tls.write("ca.key", ca_key)
        self.tls.write("ca.pem", ca_cert)
        self.tls.write("node.key", key)
        self.tls.write("node.pem", tlsca.sign_request(ca_key, ca_cert, csr, raft_id))

    def _no_ca_roll(self) -> None:
        if self.ca_roll_under_way():
            raise BadInput(
                "a rotation of the cluster CA is under way (a joiner would get the old CA); "
                "try again once `cluster status` shows it done",
                field="cluster",
            )

    # --- join tokens (kept by the node that issued them) ---
    def _token_records(self) -> dict[str, Any]:
        with self.meta.read() as txn:
            return dict(txn.get("meta", TOKENS_KEY) or {})

    def _token_key(self, token_id: bytes) -> bytes | None:
        if self.meta is None:
            return None
        return tokens.live_key(self._token_records(), token_id, time.time())

    def _token_use(self, token_id: bytes) -> dict[str, Any] | None:
        """For a join with a token of limited uses: what the leader counts in the map."""
        return tokens.use_request(self._token_records(), token_id, time.time())

    def _issue_token(self, ttl_s: int, uses: int | None = None) -> tokens.JoinToken:
        ident = self._member()
        self._no_ca_roll()
        ca = b""
        if self.tls.present():
            if not self.tls.is_ca():
                holder = self.ca_holder()
                where = f"node {holder}" if holder is not None else "the member that ran `cluster init`"
                raise BadInput(
                    f"join tokens are issued by the member holding the cluster CA ({where}); if it is "
                    "lost for good, `nodeos cluster remove` it and the CA moves to the member that ran that",
                    field="cluster",
                )
            ca = self.tls.ca_cert.read_bytes()
        now = time.time()
        tok, rec = tokens.issue(ident["cluster_id"], self.advertise, ttl_s, now, ca, uses)
        with self.meta.write() as txn:
            recs = tokens.prune(dict(txn.get("meta", TOKENS_KEY) or {}), now)
            recs[tok.token_id.hex()] = rec
            txn.put("meta", TOKENS_KEY, recs)
        log.info(
            "issued join token %s, valid for %d s, %s",
            tok.token_id.hex(),
            ttl_s,
            "any number of joins" if uses is None else f"{uses} join(s)",
        )
        return tok

    async def api_token(self, params: dict[str, Any]) -> dict[str, Any]:
        ttl, uses = tokens.check_ttl(params.get("ttl")), tokens.check_uses(params.get("uses"))
        tok = self._issue_token(ttl, uses)
        return {"token": tok.encode(), "token_id": tok.token_id.hex(), "expires": tok.expires, "uses": uses}

    async def api_token_list(self, params: dict[str, Any]) -> dict[str, Any]:
        self._member()
        recs = tokens.prune(self._token_records(), time.time())
        st = self.driver.map.state if self.driver is not None else {}
        return {
            "tokens": [
                {"token_id": k, "expires": v["expires"], "uses": v.get("uses"), "used_by": uses_of(st, k)}
                for k, v in sorted(recs.items())
            ]
        }

    async def api_token_revoke(self, params: dict[str, Any]) -> dict[str, Any]:
        self._member()
        tid = str_param(params, "token_id", max_len=64)
        with self.meta.write() as txn:
            recs = dict(txn.get("meta", TOKENS_KEY) or {})
            if tid not in recs:
                raise NotFound(f"no join token {tid} on this node", field="token_id", allowed=sorted(recs))
            del recs[tid]
            txn.put("meta", TOKENS_KEY, recs)
        log.info("revoked join token %s", tid)
        return {"revoked": tid}

    def _joiner_credentials(self, token_id: bytes, csr: Any, raft_id: int) -> dict[str, Any]:
        """What a joiner that proved `token_id` gets once its join is committed: the cluster
        secret and data keys wrapped under the token's key and, from the CA's node, a certificate."""
        self._no_ca_roll()
        key = self._token_key(token_id)
        if key is None or self.identity is None:
            raise BadInput("the join token expired or was revoked during the join", field="token")
        out = tokens.wrap_keys(key, secretroll.keys_of(self.identity))
        dkeys = datakey.keys_of(self.identity)
        if dkeys.keys:  # the key that opens host secrets in the map, under the token's key too
            out["data_keys"] = datakey.wrap_keys(key, dkeys)
        if self.tls.is_ca() and isinstance(csr, bytes):
            out["cert"] = tlsca.sign_request(
                self.tls.ca_key.read_bytes(), self.tls.ca_cert.read_bytes(), csr, raft_id
            )
            out["ca"] = self.tls.ca_cert.read_bytes()
        return out
