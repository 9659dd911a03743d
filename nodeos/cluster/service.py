"""ClusterService: the Raft member inside nodeosd (init, join, leave, status, kv).

State on disk (under `<state-dir>/cluster/`): `meta/` holds this node's cluster identity
(cluster id, secret, Raft id); `raft/` is the Raft log file (nodeos/cluster/raft_logfile.py).
The map itself is rebuilt from the Raft snapshot + log at start.

Requests that need the leader (writes, linearizable reads, join, remove) are run locally
when this node leads, else forwarded to the leader over the authenticated peer transport.
`NotLeader` errors (nothing done) are retried until the request's deadline; a write whose
fate is unknown (timeout, lost link, leader change) fails with `unknown_outcome`.

A member whose Raft loop stops (disk full, corrupt record) reports `role: failed` and the
reason, refuses requests with `not_leader` (nothing done), drops out of the cluster (its
peer listener closes) and is restarted from its on-disk state with a growing delay, so it
comes back by itself once the cause is gone.

Test-only: with NODEOS_TEST_FAULTS=1 in the environment the API gains `cluster.test.fault`
(cut this node's links to given peers). NODEOS_RAFT_TICK_MS sets the tick (default 100 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nodeos import validate
from nodeos.cluster import secretroll, tlsca
from nodeos.cluster import token as tokens
from nodeos.cluster.carotation import CaRotation
from nodeos.cluster.credentials import MemberCredentials
from nodeos.cluster.driver import RaftDriver
from nodeos.cluster.errors import NotLeader, OutcomeUnknown, PeerUnreachable
from nodeos.cluster.leader_ops import LeaderHandler, int_param, leader_call, str_param
from nodeos.cluster.map import check_kv_args
from nodeos.cluster.raft import NONE, StateRole, bootstrap_storage
from nodeos.cluster.rotation import SecretRotation
from nodeos.cluster.supervisor import MemberSupervisor
from nodeos.cluster.token import SECRET_BYTES, decode_token
from nodeos.cluster.transport import PeerTransport
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import AlreadyExists, BadInput, NodeosError

log = logging.getLogger("nodeosd.cluster")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
META_KEY = "identity"


def _open_raft_storage(path: Path) -> Any:
    from nodeos.cluster.raft_logfile import open_raft_storage

    return open_raft_storage(path)


class ClusterService(MemberSupervisor, MemberCredentials, SecretRotation, CaRotation):
    name = "cluster"

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.dir = Path(ctx.state_dir) / "cluster"
        self.tls = tlsca.TlsFiles(self.dir / "tls")  # this member's mutual-TLS identity
        self.peer_listen: tuple[str, int] | None = ctx.peer_listen
        self.advertise = ""
        if self.peer_listen is not None:
            host, port = self.peer_listen
            self.advertise = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        dp = ctx.dataplane
        self.role = "witness" if dp is None or getattr(dp, "name", "none") == "none" else "storage"
        self.faults = os.environ.get("NODEOS_TEST_FAULTS") == "1"
        self.tick_s = float(os.environ.get("NODEOS_RAFT_TICK_MS", "100")) / 1000.0
        self.meta: Any = None
        self.identity: dict[str, Any] | None = None
        self.storage: Any = None
        self.transport: PeerTransport | None = None
        self.driver: RaftDriver | None = None
        self._lock = asyncio.Lock()  # one init/join/leave at a time
        # Registered by other services too (e.g. "control"); the secret roll is the cluster's own.
        self.leader_handlers: dict[str, LeaderHandler] = {"rotate_secret": self.lead_rotation}
        self._roll_lock = asyncio.Lock()  # one secret roll at a time on this leader
        self._ca_lock = asyncio.Lock()  # one CA roll at a time driven by this member
        self._secret_watch: asyncio.Task[None] | None = None
        self.failure: str | None = None  # set while this node's Raft member is down after a fault
        self._supervisor: asyncio.Task[None] | None = None
        self._retry_delay = 0.0
        self._retry_at = 0.0

    # --- Service protocol ---
    def methods(self) -> dict[str, Handler]:
        m: dict[str, Handler] = {
            "cluster.init": self.api_init,
            "cluster.join": self.api_join,
            "cluster.leave": self.api_leave,
            "cluster.remove": self.api_remove,
            "cluster.status": self.api_status,
            "cluster.token": self.api_token,
            "cluster.token.list": self.api_token_list,
            "cluster.token.revoke": self.api_token_revoke,
            "cluster.secret.rotate": self.api_rotate_secret,
            "cluster.ca.rotate": self.api_rotate_ca,
            "cluster.kv.get": self.api_kv_get,
            "cluster.kv.put": self.api_kv_put,
            "cluster.kv.cas": self.api_kv_cas,
        }
        if self.faults:
            m["cluster.test.fault"] = self.api_fault
        return m

    async def start(self) -> None:
        from nodeos.store.lmdb_store import Store

        self.meta = Store(self.dir / "meta", dbs=["meta"])
        with self.meta.read() as txn:
            self.identity = txn.get("meta", META_KEY)
        if self.identity is None:
            await self._bootstrap(solo=True)  # a lone node is a cluster of one
        else:
            # A node killed right after joining has no map yet: the join reply's peers let it
            # reach the cluster and catch up.
            try:
                await self._start_member(extra_peers=self._saved_peers())
            except Exception as exc:
                await self._member_failed(exc)
            else:
                assert self.driver is not None
                if set(self.driver.conf_state.voters) == {self.driver.id}:
                    self.driver.campaign()  # the only voter: no reason to wait out an election timeout
                log.info(
                    "cluster member %d of cluster %s", self.identity["raft_id"], self.identity["cluster_id"]
                )
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())
        self._secret_watch = asyncio.get_running_loop().create_task(self._watch_secret())

    async def stop(self) -> None:
        await cancel_and_wait(self._secret_watch, self._supervisor)
        self._secret_watch = self._supervisor = None
        await self._stop_member()
        if self.meta is not None:
            self.meta.close()
            self.meta = None

    def status(self) -> dict[str, Any]:
        if self.identity is not None and (self.failure is not None or self.driver is None):
            return {
                "member": True,
                "cluster_id": self.identity["cluster_id"],
                "node_id": self.identity["raft_id"],
                "role": "failed",
                "failure": self.failure or "the cluster service is not running",
                "peer_listen": self.advertise,
            }
        if self.identity is None or self.driver is None:
            return {"member": False, "peer_listen": self.advertise or None}
        d = self.driver
        st = d.node.status()
        return {
            "member": True,
            "solo": bool(self.identity.get("solo")),
            "cluster_id": self.identity["cluster_id"],
            "node_id": d.id,
            "role": st.soft_state.role.value,
            "leader": st.soft_state.leader or None,
            "term": st.hard_state.term,
            "commit": st.hard_state.commit,
            "peer_listen": self.advertise,
            **self.ca_summary(),
        }

    # --- membership of this node ---
    def _default_raft_id(self) -> int:
        try:
            return int(str(self.ctx.node_id)[:12], 16) or 1
        except ValueError:
            return 1

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
        await self._stop_member()
        await asyncio.to_thread(self._wipe_raft_dir)
        shutil.rmtree(self.tls.dir, ignore_errors=True)
        self._save_identity(None)

    def _make_transport(self, raft_id: int, cluster_id: str, keys: secretroll.MemberKeys) -> PeerTransport:
        return PeerTransport(
            raft_id,
            cluster_id,
            keys.dial,
            self._on_raft,
            self._on_request,
            advertise=self.advertise,
            token_key=self._token_key,
            secret_gen=keys.dial_gen,
            accepted=keys.secrets,
            **self._tls_contexts(),
        )

    async def _start_member(
        self, extra_peers: dict[int, str], transport: PeerTransport | None = None
    ) -> None:
        ident = self.identity
        assert ident is not None
        if transport is None:
            transport = self._make_transport(ident["raft_id"], ident["cluster_id"], secretroll.keys_of(ident))
            if self.peer_listen is not None:  # a cluster of one without a peer listener is fine
                await transport.listen(*self.peer_listen)
        self.transport = transport
        # Storage that fails to open (corrupt record) leaves transport/storage set: the caller's
        # _member_failed() takes them down.
        self.storage = await asyncio.to_thread(_open_raft_storage, self.dir / "raft")
        self.driver = RaftDriver(
            ident["raft_id"],
            self.storage,
            transport,
            tick_s=self.tick_s,
            on_removed=self._on_removed,
            extra_peers=extra_peers,
        )
        self.driver.start()

    async def _stop_member(self) -> None:
        if self.driver is not None:
            await self.driver.stop()
            self.driver = None
        if self.transport is not None:
            await self.transport.close()
            self.transport = None
        if self.storage is not None:
            with contextlib.suppress(Exception):
                self.storage.close()
            self.storage = None

    def _save_identity(self, ident: dict[str, Any] | None) -> None:
        with self.meta.write() as txn:
            if ident is None:
                txn.delete("meta", META_KEY)
            else:
                txn.put("meta", META_KEY, ident)
        self.identity = ident

    def _wipe_raft_dir(self) -> None:
        shutil.rmtree(self.dir / "raft", ignore_errors=True)

    def _on_removed(self) -> None:
        log.warning("this node was removed from the cluster")

    # --- API: init / join / leave / token / status ---
    async def api_init(self, params: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            self._need_peer_listen()
            raft_id = int_param(params, "node_id") or self._default_raft_id()
            fd = params.get("failure_domain")
            if fd is not None:
                str_param(params, "failure_domain")
            ttl = tokens.check_ttl(params.get("ttl"))
            if self.identity is not None and self.identity.get("solo") and self.holds_storage():
                await self._open_solo(params, fd)
            else:
                self._replaceable()
                await self._drop_solo()
                await self._bootstrap(solo=False, raft_id=raft_id, fd=fd)
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

    async def _bootstrap(self, *, solo: bool, raft_id: int | None = None, fd: str | None = None) -> None:
        """A new one-voter cluster on this node (at first start: its cluster of one)."""
        raft_id = raft_id or self._default_raft_id()
        cluster_id = uuid.uuid4().hex
        secret = os.urandom(SECRET_BYTES)
        # A crash after bootstrap but before the identity is saved leaves a raft dir with
        # no identity: it belongs to no cluster and is cleared here.
        await asyncio.to_thread(self._wipe_raft_dir)
        storage = await asyncio.to_thread(_open_raft_storage, self.dir / "raft")
        try:
            bootstrap_storage(storage, [raft_id])
        finally:
            storage.close()
        await asyncio.to_thread(self._make_tls, cluster_id, raft_id)
        ident: dict[str, Any] = {"cluster_id": cluster_id, "secret": secret, "raft_id": raft_id}
        if solo:
            ident["solo"] = True
        self._save_identity(ident)
        await self._start_member(extra_peers={})
        assert self.driver is not None
        self.driver.campaign()
        init = {"cluster_id": cluster_id, "ca_holder": raft_id}
        await self._at_leader("command", {"cmd": "init_cluster", "args": init}, 10)
        await self._at_leader("command", {"cmd": "add_node", "args": self._node_args(raft_id, fd)}, 10)
        log.info("created cluster %s%s as node %d", cluster_id, " (of one)" if solo else "", raft_id)

    def _node_args(self, raft_id: int, fd: str | None) -> dict[str, Any]:
        args: dict[str, Any] = {
            "node_id": raft_id,
            "addresses": {"peer": self.advertise},
            "role": self.role,
            "name": self.ctx.node_name or f"node-{raft_id}",
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
            raft_id = int_param(params, "node_id") or self._default_raft_id()
            fd = params.get("failure_domain")
            if fd is not None:
                str_param(params, "failure_domain")
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
            members = {int(k): str(v) for k, v in (reply.get("members") or {}).items()}
            await self._stop_member()  # the cluster of one this node leaves (it holds nothing)
            await asyncio.to_thread(self._wipe_raft_dir)
            shutil.rmtree(self.tls.dir, ignore_errors=True)
            if isinstance(reply.get("cert"), bytes) and isinstance(reply.get("ca"), bytes):
                self.tls.write("node.key", key_pem)
                self.tls.write("node.pem", reply["cert"])
                self.tls.write("ca.pem", reply["ca"])
            self._save_identity(
                secretroll.with_keys(
                    {
                        "cluster_id": token.cluster_id,
                        "raft_id": raft_id,
                        "peers": {str(k): v for k, v in members.items()},
                    },
                    keys,
                )
            )
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
            await self._stop_member()
            await asyncio.to_thread(self._wipe_raft_dir)
            shutil.rmtree(self.tls.dir, ignore_errors=True)
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

    async def api_status(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.identity is not None and (self.failure is not None or self.driver is None):
            return {**self.status(), "leader": None, "members": [], "raft_loop_running": False}
        if self.identity is None or self.driver is None:
            return {"member": False, "cluster_id": None, "leader": None, "members": []}
        d = self.driver
        local = d.status()
        progress = local.get("progress")
        if progress is None and d.leader not in (NONE, d.id) and self.transport is not None:
            with contextlib.suppress(NodeosError):
                remote = await self.transport.request(d.leader, "cluster.progress", {}, timeout=1.0)
                progress = {int(k): v for k, v in (remote.get("progress") or {}).items()}
        members = []
        ids = sorted(set(d.conf_state.voters) | set(d.conf_state.learners) | set(d.map.nodes))
        for nid in ids:
            node = d.map.nodes.get(nid, {})
            pr = (progress or {}).get(nid, {})
            members.append(
                {
                    "node_id": nid,
                    "name": node.get("name"),
                    "address": (node.get("addresses") or {}).get("peer"),
                    "role": node.get("role"),
                    "failure_domain": node.get("failure_domain"),
                    "labels": dict(node.get("labels") or {}),
                    "raft": "voter"
                    if nid in d.conf_state.voters
                    else ("learner" if nid in d.conf_state.learners else "none"),
                    "match": pr.get("match"),
                    "lag": pr.get("lag"),
                    "is_self": nid == d.id,
                }
            )
        return {
            "member": True,
            "solo": bool(self.identity.get("solo")),
            "cluster_id": self.identity["cluster_id"],
            "node_id": d.id,
            "role": local["role"],
            "leader": local["leader"],
            "term": local["term"],
            "commit": local["commit"],
            "applied": local["applied"],
            "last_index": local["last_index"],
            "members": members,
            "rejected_commands": len(d.map.state["rejected"]),
            "rejected": d.map.state["rejected"][-5:],
            "raft_loop_running": d.running,
            "transport": self._transport_stats(),
            "secret": self.secret_status(),
            "ca": self.ca_status(),
        }

    def _transport_stats(self) -> dict[str, Any]:
        t = self.transport
        if t is None:
            return {}
        st = t.stats
        return {
            "dropped": st.dropped,
            "refused": st.refused,
            "shed": st.shed,
            "bad_frames": st.bad_frames,
            "sent": st.sent,
            "received": st.received,
        }

    # --- API: kv ---
    async def api_kv_get(self, params: dict[str, Any]) -> dict[str, Any]:
        key = str_param(params, "key")
        return await self._at_leader("kv_get", {"key": key}, self._timeout(params), idempotent=True)

    async def api_kv_put(self, params: dict[str, Any]) -> dict[str, Any]:
        args = {"key": str_param(params, "key"), "value": params.get("value")}
        check_kv_args(args)
        return await self._at_leader("command", {"cmd": "kv_put", "args": args}, self._timeout(params))

    async def api_kv_cas(self, params: dict[str, Any]) -> dict[str, Any]:
        args = {
            "key": str_param(params, "key"),
            "expect": params.get("expect"),
            "value": params.get("value"),
        }
        check_kv_args(args, with_expect=True)
        return await self._at_leader("command", {"cmd": "kv_cas", "args": args}, self._timeout(params))

    def _timeout(self, params: dict[str, Any]) -> float:
        t = params.get("timeout", 5.0)
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t <= 300:
            raise BadInput("timeout must be a number of seconds in (0, 300]", field="timeout")
        return float(t)

    async def api_fault(self, params: dict[str, Any]) -> dict[str, Any]:
        drop = params.get("drop", [])
        if not isinstance(drop, list) or not all(type(x) is int for x in drop):
            raise BadInput("drop must be a list of node ids", field="drop")
        t = self.transport
        if t is None:
            raise BadInput("this node is not a cluster member", field="cluster")
        t.blocked = set(drop)
        return {"blocked": sorted(t.blocked)}

    # --- leader-side work and forwarding ---
    def _member(self) -> dict[str, Any]:
        if self.identity is None:
            raise BadInput(
                "this node is not a member of a cluster (use `cluster init` or `cluster join`)",
                field="cluster",
            )
        return self.identity

    def _drv(self) -> RaftDriver:
        self._member()
        if self.failure is not None:
            raise NotLeader(f"this node's cluster member has failed ({self.failure}); nothing was done")
        if self.driver is None or (self.driver._tasks and not self.driver.running):
            raise NotLeader("the cluster service is not running on this node; nothing was done")
        return self.driver

    async def at_leader(
        self, method: str, params: dict[str, Any], timeout: float, idempotent: bool = False
    ) -> Any:
        """Run a leader method at the leader (here or forwarded); for other services."""
        return await self._at_leader(method, params, timeout, idempotent)

    async def _at_leader(
        self, method: str, params: dict[str, Any], timeout: float, idempotent: bool = False
    ) -> Any:
        """Run a leader method here or at the leader; retry while nothing was done."""
        deadline = time.monotonic() + timeout
        while True:
            d = self._drv()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NotLeader(f"no leader could take the request within {timeout} s")
            try:
                if d.role is StateRole.LEADER:
                    return await leader_call(d, method, params, remaining, self.leader_handlers)
                if d.leader == NONE or self.transport is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(d.leader_changed.wait(), min(remaining, 0.5))
                    continue
                return await self.transport.request(
                    d.leader,
                    "cluster.fwd",
                    {"method": method, "params": params, "timeout": remaining},
                    timeout=remaining + 1.0,
                )
            except NotLeader:
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                continue
            except PeerUnreachable as err:
                if idempotent:
                    await asyncio.sleep(0.05)
                    continue
                raise OutcomeUnknown(f"lost contact with the leader: {err.message}") from None

    # --- transport callbacks ---
    def _on_raft(self, frm: int, msg: dict[str, Any]) -> None:
        if self.driver is not None:
            self.driver.on_raft(frm, msg)

    async def _on_request(self, frm: int, method: str, params: dict[str, Any]) -> Any:
        if method == "cluster.join":
            token_id = params.pop("join_token_id", None)  # set by the transport for token sessions
            csr = params.pop("csr", None)  # not for the map: only the CA's node reads it
            if params.get("node_id") != frm:
                raise BadInput("join: node_id differs from the id the peer authenticated as", field="node_id")
            out = await self._at_leader("join", params, timeout=15.0)
            if token_id is not None:
                creds = await asyncio.to_thread(self._joiner_credentials, token_id, csr, frm)
                out = {**out, **creds}
            return out
        if method == "cluster.fwd":
            inner, inner_params = params.get("method"), params.get("params") or {}
            if inner not in ("command", "kv_get", "join", "remove", *self.leader_handlers):
                raise BadInput(f"unknown forwarded method {inner!r}", field="method")
            if inner == "lease":
                inner_params = {"node_id": frm}  # a member renews its own lease only
            timeout = params.get("timeout")
            if not isinstance(timeout, (int, float)) or not 0 < timeout <= 300:
                timeout = 5.0 if inner != "join" else 15.0
            return await leader_call(
                self._drv(), str(inner), inner_params, float(timeout), self.leader_handlers
            )
        if method == "cluster.progress":
            return self._drv().status()
        if method.startswith("cluster.secret."):
            self._drv()
            return await self.secret_peer_request(frm, method, params)
        if method.startswith("cluster.ca."):
            self._drv()
            return await self.ca_peer_request(frm, method, params)
        raise BadInput(f"unknown peer method {method!r}", field="method")


def create_service(ctx: Any) -> ClusterService:
    return ClusterService(ctx)
