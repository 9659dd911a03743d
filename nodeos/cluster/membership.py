"""Membership of this node: `cluster init`, `join`, `leave` and `remove`.

Part of ClusterService (nodeos/cluster/service.py). A node starts as a cluster of one; `cluster init`
opens it to others (or replaces it by a new cluster when it holds nothing), `cluster join` trades it
for a member of another cluster (empty), `cluster leave` hands over leadership, leaves and starts a new
cluster of one, `cluster remove` takes another member out for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeos import validate
from nodeos.cluster import datakey, features, secretroll, tlsca
from nodeos.cluster import token as tokens
from nodeos.cluster.errors import OutcomeUnknown
from nodeos.cluster.leader_ops import int_param, str_param
from nodeos.cluster.raft import StateRole, bootstrap_storage
from nodeos.cluster.token import SECRET_BYTES, decode_token
from nodeos.cluster.transport import PeerTransport
from nodeos.errors import AlreadyExists, BadInput

if TYPE_CHECKING:
    from nodeos.cluster.driver import RaftDriver

log = logging.getLogger("nodeosd.cluster")


def open_raft_storage(path: Path) -> Any:
    """This member's Raft log file (imported late: the daemon starts without LMDB loaded)."""
    from nodeos.cluster.raft_logfile import open_raft_storage as open_log

    return open_log(path)


class Membership:
    """Mixin of ClusterService: the attributes below are the service's."""

    ctx: Any
    dir: Path
    tls: tlsca.TlsFiles
    advertise: str
    peer_listen: tuple[str, int] | None
    role: str
    known_level: int
    identity: dict[str, Any] | None
    driver: RaftDriver | None
    transport: PeerTransport | None
    _lock: asyncio.Lock

    if TYPE_CHECKING:  # provided by ClusterService and its other mixins

        async def _start_member(
            self, extra_peers: dict[int, str], transport: PeerTransport | None = None
        ) -> None: ...

        async def _stop_member(self) -> None: ...

        def _save_identity(self, ident: dict[str, Any] | None) -> None: ...

        def _drv(self) -> RaftDriver: ...

        async def _at_leader(
            self, method: str, params: dict[str, Any], timeout: float, idempotent: bool = False
        ) -> Any: ...

        def _on_raft(self, frm: int, msg: dict[str, Any]) -> None: ...

        async def _on_request(self, frm: int, method: str, params: dict[str, Any]) -> Any: ...

        def _make_tls(self, cluster_id: str, raft_id: int) -> None: ...

        def _issue_token(self, ttl_s: int) -> tokens.JoinToken: ...

        def left_behind(self) -> bool: ...

        def ca_holder(self) -> int | None: ...

        async def _move_ca_here(self, d: RaftDriver, gone: int) -> dict[str, Any]: ...

    # --- checks and the cluster of one ---
    def _default_raft_id(self) -> int:
        try:
            return int(str(self.ctx.node_id)[:12], 16) or 1
        except ValueError:
            return 1

    def _id_and_domain(self, params: dict[str, Any]) -> tuple[int, str | None]:
        """The Raft id (`node_id`, default: from the node id) and failure domain asked for."""
        raft_id = int_param(params, "node_id") or self._default_raft_id()
        fd = params.get("failure_domain")
        if fd is not None:
            str_param(params, "failure_domain")
        return raft_id, fd

    def _need_peer_listen(self) -> None:
        if not self.advertise:
            raise BadInput(
                "this nodeosd has no peer listener; start it with --peer-listen HOST:PORT",
                field="peer_listen",
            )

    def _not_member(self) -> None:
        if self.identity is not None:
            raise AlreadyExists(
                f"this node already belongs to cluster {self.identity['cluster_id']}", field="cluster"
            )

    def holds_storage(self) -> list[str]:
        """What this node's map holds that a fresh cluster would lose (pools, volumes, hosts)."""
        if self.driver is None:
            return []
        st = self.driver.map.state
        return [f"{len(st[k])} {k}" for k in ("pools", "volumes", "snapshots", "hosts") if st.get(k)]

    def _replaceable(self) -> None:
        """`cluster init` / `cluster join` replace this node's cluster only when it is a cluster
        of one that holds nothing (a node joins another cluster empty)."""
        if self.identity is None or self.left_behind():
            return  # a member left behind by a secret roll joins again as a new one
        if not self.identity.get("solo"):
            self._not_member()
        held = self.holds_storage()
        if held:
            raise BadInput(
                f"this node's cluster of one already holds {', '.join(held)}; a node joins another "
                "cluster empty (delete them first, or `cluster init` to open this one to others)",
                field="cluster",
            )

    async def _drop_solo(self) -> None:
        """Take this node's (empty) cluster of one down for good: a new one replaces it."""
        if self.identity is None:
            return
        await self._wipe_member()
        self._save_identity(None)

    async def _wipe_member(self) -> None:
        """Stop this node's member and delete its Raft log and TLS identity (not its saved identity)."""
        await self._stop_member()
        await asyncio.to_thread(self._wipe_raft_dir)
        shutil.rmtree(self.tls.dir, ignore_errors=True)

    def _wipe_raft_dir(self) -> None:
        shutil.rmtree(self.dir / "raft", ignore_errors=True)

    # --- API ---
    async def api_init(self, params: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            self._need_peer_listen()
            raft_id, fd = self._id_and_domain(params)
            ttl = tokens.check_ttl(params.get("ttl"), default=tokens.INIT_TTL_S)
            if self.identity is not None and self.identity.get("solo") and self.holds_storage():
                await self._open_solo(params, fd)
            else:
                self._replaceable()
                await self._drop_solo()
                level = features.check_init_level(params.get("feature_level"), self.known_level)
                await self._bootstrap(solo=False, raft_id=raft_id, fd=fd, level=level)
            assert self.identity is not None and self.driver is not None
            tok = self._issue_token(ttl)
            return {
                "cluster_id": self.identity["cluster_id"],
                "node_id": self.driver.id,
                "token": tok.encode(),
                "token_id": tok.token_id.hex(),
                "token_expires": tok.expires,
                "address": self.advertise,
            }

    async def _open_solo(self, params: dict[str, Any], fd: str | None) -> None:
        """`cluster init` on a cluster of one that already holds pools or volumes: the same
        cluster (same ids, same map, same CA) becomes joinable; nothing is re-created."""
        ident = self.identity
        assert ident is not None
        d = self._drv()
        level = params.get("feature_level")
        if level is not None and level != features.cluster_level(d.map.state):
            raise BadInput(
                f"this node's own cluster (it holds data) is at feature level "
                f"{features.cluster_level(d.map.state)}; a level is never lowered, and raised with "
                "`nodeos cluster set feature-level`",
                field="feature_level",
            )
        wanted = params.get("node_id")
        if wanted is not None and wanted != d.id:
            raise BadInput(
                f"this node is already member {d.id} of its own cluster (it holds data); "
                "its id cannot change",
                field="node_id",
            )
        if self.transport is not None and not self.transport.listening:
            assert self.peer_listen is not None
            await self.transport.listen(*self.peer_listen)
        addresses = self._node_args(d.id, None)["addresses"]
        await self._at_leader(
            "command", {"cmd": "node_update", "args": {"node_id": d.id, "addresses": addresses}}, 10
        )
        if fd:
            await self._at_leader(
                "command", {"cmd": "set_failure_domain", "args": {"node_id": d.id, "failure_domain": fd}}, 10
            )
        self._save_identity({k: v for k, v in ident.items() if k != "solo"})
        log.info("cluster %s (of one) is open to other nodes now", ident["cluster_id"])

    async def _bootstrap(
        self, *, solo: bool, raft_id: int | None = None, fd: str | None = None, level: int | None = None
    ) -> None:
        """A new one-voter cluster on this node (at first start: its cluster of one)."""
        raft_id = raft_id or self._default_raft_id()
        cluster_id = uuid.uuid4().hex
        secret = os.urandom(SECRET_BYTES)
        # A crash after bootstrap but before the identity is saved leaves a raft dir with
        # no identity: it belongs to no cluster and is cleared here.
        await asyncio.to_thread(self._wipe_raft_dir)
        storage = await asyncio.to_thread(open_raft_storage, self.dir / "raft")
        try:
            bootstrap_storage(storage, [raft_id])
        finally:
            storage.close()
        await asyncio.to_thread(self._make_tls, cluster_id, raft_id)
        ident: dict[str, Any] = {"cluster_id": cluster_id, "secret": secret, "raft_id": raft_id}
        # The key that seals host secrets in the map: made here, never in the Raft log.
        ident = datakey.with_keys(ident, datakey.new_keys())
        if solo:
            ident["solo"] = True
        self._save_identity(ident)
        await self._start_member(extra_peers={})
        assert self.driver is not None
        self.driver.campaign()
        # A new cluster starts at the feature level its first member knows (every member that
        # joins must know it: features.check_join); `cluster init --feature-level` starts lower,
        # for a cluster that older releases will join.
        init = {"cluster_id": cluster_id, "ca_holder": raft_id, "feature_level": level or self.known_level}
        await self._at_leader("command", {"cmd": "init_cluster", "args": init}, 10)
        await self._at_leader("command", {"cmd": "add_node", "args": self._node_args(raft_id, fd)}, 10)
        log.info("created cluster %s%s as node %d", cluster_id, " (of one)" if solo else "", raft_id)

    def _node_args(self, raft_id: int, fd: str | None) -> dict[str, Any]:
        args: dict[str, Any] = {
            "node_id": raft_id,
            "addresses": {"peer": self.advertise},
            "role": self.role,
            "name": self.ctx.node_name or f"node-{raft_id}",
            **features.member_report(self.known_level),  # what its release knows (features.py)
        }
        if fd:
            args["failure_domain"] = fd
        return args

    async def api_join(self, params: dict[str, Any]) -> dict[str, Any]:
        address = params.get("address")
        validate.host_port(address, "address")
        token = decode_token(params.get("token"))  # type: ignore[arg-type]
        async with self._lock:
            self._replaceable()
            self._need_peer_listen()
            assert self.peer_listen is not None
            raft_id, fd = self._id_and_domain(params)
            if token.expires <= time.time():
                raise BadInput("the join token has expired; ask a member for a new one", field="token")
            # This connection proves the token's key, not the cluster secret (which it lacks); TLS
            # trusts the CA the token names. The new key stays here: only a request is sent.
            key_pem, csr = await asyncio.to_thread(tlsca.make_request, raft_id, token.cluster_id)
            transport = PeerTransport(
                raft_id,
                token.cluster_id,
                token.key,
                self._on_raft,
                self._on_request,
                advertise=self.advertise,
                join_id=token.token_id,
                tls_client=tlsca.client_context(token.ca) if token.ca else None,
            )
            try:
                rejoin = {"rejoin": True} if self.left_behind() else {}
                reply = await transport.request_address(
                    str(address),
                    "cluster.join",
                    {**self._node_args(raft_id, fd), "csr": csr, **rejoin},
                    timeout=20.0,
                )
            except BadInput as err:
                await transport.close()
                if err.field == "cluster":
                    raise BadInput(
                        f"{address} is not a member of the token's cluster {token.cluster_id} (or the "
                        "token is older than a rotation of the cluster CA: ask for a new one)",
                        field="token",
                    ) from None
                raise
            finally:
                await transport.close()
            keys = tokens.unwrap_keys(token.key, reply)
            # A member from before sends no data key: the leader hands it over later
            # (nodeos/cluster/datakeys_member.py).
            dkeys = datakey.unwrap_keys(token.key, reply["data_keys"]) if "data_keys" in reply else None
            members = {int(k): str(v) for k, v in (reply.get("members") or {}).items()}
            await self._wipe_member()  # the cluster of one this node leaves (it holds nothing)
            if isinstance(reply.get("cert"), bytes) and isinstance(reply.get("ca"), bytes):
                self.tls.write("node.key", key_pem)
                self.tls.write("node.pem", reply["cert"])
                self.tls.write("ca.pem", reply["ca"])
            ident = secretroll.with_keys(
                {
                    "cluster_id": token.cluster_id,
                    "raft_id": raft_id,
                    "peers": {str(k): v for k, v in members.items()},
                },
                keys,
            )
            self._save_identity(ident if dkeys is None else datakey.with_keys(ident, dkeys))
            await self._start_member(extra_peers=members)
            log.info("joined cluster %s as node %d", token.cluster_id, raft_id)
            return {"cluster_id": token.cluster_id, "node_id": raft_id, "leader": reply.get("leader")}

    async def api_leave(self, params: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            ident = self._member()
            d = self._drv()
            me = d.id
            voters = set(d.conf_state.voters)
            if voters == {me} and not d.conf_state.learners:
                raise BadInput("the last member of a cluster cannot leave it", field="cluster")
            held = sorted(p["name"] for p in d.map.state["pools"].values() if p["node"] == me)
            if held:
                raise BadInput(
                    f"this node still holds pools {', '.join(held)}; delete them first", field="cluster"
                )
            if d.role is StateRole.LEADER:
                await self._hand_over_leadership(d)
            await self._at_leader("remove", {"node_id": me}, timeout=20.0)
            await self._wipe_member()
            self._save_identity(None)
            log.info("left cluster %s", ident["cluster_id"])
            await self._bootstrap(solo=True)
            return {"left": ident["cluster_id"], "node_id": me}

    async def api_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        """Remove another member (gone for good, or compromised): it may not come back as it was."""
        nid = int_param(params, "node_id", required=True)
        d = self._drv()
        if nid == d.id:
            raise BadInput("that is this node: use `nodeos cluster leave`", field="node_id")
        if nid == d.leader:
            raise BadInput(
                f"node {nid} leads the cluster: run `nodeos cluster leave` on it, or stop it and wait "
                "for another leader",
                field="node_id",
            )
        out: dict[str, Any] = await self._at_leader("remove", {"node_id": nid}, timeout=20.0)
        log.info("node %d removed from the cluster", nid)
        if nid == self.ca_holder():
            out["ca"] = await self._move_ca_here(d, nid)
        return out

    async def _hand_over_leadership(self, d: RaftDriver) -> None:
        st = d.node.status()
        others = [(pr.match, nid) for nid, pr in st.progress.items() if nid != d.id and not pr.is_learner]
        if not others:
            raise BadInput("no other voter can take over leadership", field="cluster")
        d.transfer_leadership(max(others)[1])
        deadline = time.monotonic() + 5.0
        while d.role is StateRole.LEADER and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(d.leader_changed.wait(), deadline - time.monotonic())
        if d.role is StateRole.LEADER:
            raise OutcomeUnknown("leadership transfer did not finish; try `cluster leave` again")
