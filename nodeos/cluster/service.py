"""ClusterService: the Raft member inside nodeosd (status, kv, requests at the leader).

Its parts: membership of this node (init, join, leave, remove: nodeos/cluster/membership.py),
restarts after a fault (supervisor.py), TLS identity and join tokens (credentials.py), the secret
and CA rolls (rotation.py, carotation.py).

State on disk (under `<state-dir>/cluster/`): `meta/` holds this node's cluster identity
(cluster id, secret, data key (datakeys_member.py), Raft id); `raft/` is the Raft log file
(nodeos/cluster/raft_logfile.py).
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
(cut this node's links to given peers) and `cluster.test.host_keys` (datakeys_member.py).
The tick is the configuration's `raft_tick_ms` (default 100 ms); NODEOS_RAFT_TICK_MS overrides it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nodeos.cluster import secretroll, tlsca
from nodeos.cluster.carotation import CaRotation
from nodeos.cluster.credentials import MemberCredentials
from nodeos.cluster.datakeys_member import DataKeyHolder
from nodeos.cluster.driver import RaftDriver
from nodeos.cluster.errors import NotLeader, OutcomeUnknown, PeerUnreachable
from nodeos.cluster.feature_member import FeatureMember, GatedDriver, known_level_from_env
from nodeos.cluster.leader_ops import LeaderHandler, leader_call, str_param
from nodeos.cluster.map import ClusterMap, check_kv_args
from nodeos.cluster.membership import Membership, open_raft_storage
from nodeos.cluster.raft import NONE, StateRole
from nodeos.cluster.rotation import SecretRotation
from nodeos.cluster.supervisor import MemberSupervisor
from nodeos.cluster.transport import PeerTransport
from nodeos.cluster.voter_keeper import member_voting, status_section
from nodeos.cluster.voters import check_policy_args, policy_of
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import BadInput, NodeosError

# Leader methods other services register in `leader_handlers` once they have started.
SERVICE_HANDLERS = ("control", "lease")

log = logging.getLogger("nodeosd.cluster")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
META_KEY = "identity"


class ClusterService(
    Membership, MemberSupervisor, MemberCredentials, SecretRotation, CaRotation, DataKeyHolder, FeatureMember
):
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
        tick_ms = os.environ.get("NODEOS_RAFT_TICK_MS") or getattr(
            getattr(ctx, "config", None), "raft_tick_ms", 100
        )
        self.tick_s = float(tick_ms) / 1000.0
        self.meta: Any = None
        self.identity: dict[str, Any] | None = None
        self.storage: Any = None
        self.transport: PeerTransport | None = None
        self.driver: RaftDriver[ClusterMap] | None = None
        self._lock = asyncio.Lock()  # one init/join/leave at a time
        # Registered by other services too (e.g. "control"); the secret roll is the cluster's own.
        self.leader_handlers: dict[str, LeaderHandler] = {
            "rotate_secret": self.lead_rotation,
            "feature_level": self.lead_feature_level,  # cluster set feature-level (feature_member.py)
        }
        self.peer_handlers: dict[str, Any] = {}  # method prefix -> (frm, method, params), e.g. "update."
        self.known_level = known_level_from_env()  # the map commands this release knows (features.py)
        self._stall_reported: str | None = None
        self._feature_watch: asyncio.Task[None] | None = None
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
            "cluster.kv.delete": self.api_kv_delete,
            "cluster.set": self.api_set,
        }
        if self.faults:
            m["cluster.test.fault"] = self.api_fault
            m["cluster.test.host_keys"] = self.api_test_host_keys
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
        self._feature_watch = asyncio.get_running_loop().create_task(self._watch_features())

    async def stop(self) -> None:
        await cancel_and_wait(self._secret_watch, self._supervisor, self._feature_watch)
        self._secret_watch = self._supervisor = self._feature_watch = None
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
            "features": self.feature_status(),
        }

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
                try:
                    await transport.listen(*self.peer_listen)
                except OSError as exc:  # taken since nodeosd's pre-flight check: say so, no traceback
                    from nodeos.daemon.preflight import bind_error

                    await transport.close()
                    host, port = self.peer_listen
                    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                    raise bind_error(where, "peer_listen", exc) from None
        self.transport = transport
        # Storage that fails to open (corrupt record) leaves transport/storage set: the caller's
        # _member_failed() takes them down.
        self.storage = await asyncio.to_thread(open_raft_storage, self.dir / "raft")
        self.driver = GatedDriver(
            ident["raft_id"],
            self.storage,
            transport,
            state_machine=ClusterMap(self.known_level),
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

    def _on_removed(self) -> None:
        log.warning("this node was removed from the cluster")

    # --- API: init / join / leave / token / status ---

    async def api_status(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.identity is not None and (self.failure is not None or self.driver is None):
            return {**self.status(), "leader": None, "members": [], "raft_loop_running": False}
        if self.identity is None or self.driver is None:
            return {"member": False, "cluster_id": None, "leader": None, "members": []}
        d = self.driver
        local = d.status()
        progress, vote = local.get("progress"), local.get("voter_set")
        if progress is None and d.leader not in (NONE, d.id) and self.transport is not None:
            with contextlib.suppress(NodeosError):
                remote = await self.transport.request(d.leader, "cluster.progress", {}, timeout=1.0)
                progress = {int(k): v for k, v in (remote.get("progress") or {}).items()}
                vote = remote.get("voter_set")
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
                    "release": node.get("release"),  # what it told the map (feature_member.py)
                    "knows_level": node.get("knows_level", 1),
                    "raft": "voter"
                    if nid in d.conf_state.voters
                    else ("learner" if nid in d.conf_state.learners else "none"),
                    "match": pr.get("match"),
                    "lag": pr.get("lag"),
                    "is_self": nid == d.id,
                    **member_voting(nid, vote),  # its domain and why it votes (the leader's view)
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
            "voters": status_section(vote, d.conf_state, policy_of(d.map.state)),
            **d.map.observed(),  # rejected and nonconforming commands
            "raft_loop_running": d.running,
            "transport": self._transport_stats(),
            "secret": self.secret_status(),
            "ca": self.ca_status(),
            "data_key": self.data_key_status(),
            "features": self.feature_status(),
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
            "over_source_cap": st.over_source_cap,
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

    async def api_set(self, params: dict[str, Any]) -> dict[str, Any]:
        """`cluster set`: how many voters, and when a silent voter is replaced (voters.py); or the
        cluster's feature level (features.py)."""
        if params.get("feature_level") is not None:
            return await self.api_set_feature_level(params["feature_level"], self._timeout(params))
        args = check_policy_args({k: v for k, v in params.items() if k != "timeout"})
        return await self._at_leader("command", {"cmd": "cluster_set", "args": args}, self._timeout(params))

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
                return await self._forward(d, method, params, remaining, idempotent)
            except NotLeader:
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                continue
            except PeerUnreachable as err:
                if idempotent:
                    await asyncio.sleep(0.05)
                    continue
                raise OutcomeUnknown(f"lost contact with the leader: {err.message}") from None

    async def _forward(
        self, d: RaftDriver, method: str, params: dict[str, Any], remaining: float, idempotent: bool
    ) -> Any:
        """Forward to the leader this node knows, until it answers or this node sees the leader
        change. A powered-off leader never answers nor resets the connection: without the race,
        a request sent to it just before it died waited out its whole budget although another
        leader was elected a second later (the console's `volume show` failed after 15 s)."""
        assert self.transport is not None
        changed = d.leader_changed
        fwd = asyncio.ensure_future(
            self.transport.request(
                d.leader,
                "cluster.fwd",
                {"method": method, "params": params, "timeout": remaining},
                timeout=remaining + 1.0,
            )
        )
        moved = asyncio.ensure_future(changed.wait())
        try:
            await asyncio.wait({fwd, moved}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            moved.cancel()
            answered = fwd.done()
            if not answered:
                fwd.cancel()
        if answered:
            return fwd.result()
        if idempotent:
            raise NotLeader("the leader changed while the request was there; asking the next one")
        raise OutcomeUnknown("the leader changed while it had the request; it may or may not be applied")

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
            use = self._token_use(token_id) if token_id is not None else None
            if use is not None:  # a token of limited uses: the leader counts this join in the map
                params["token_use"] = use
            out = await self._at_leader("join", params, timeout=15.0)
            if token_id is not None:
                creds = await asyncio.to_thread(self._joiner_credentials, token_id, csr, frm)
                out = {**out, **creds}
            return out
        if method == "cluster.fwd":
            inner, inner_params = params.get("method"), params.get("params") or {}
            if inner not in ("command", "kv_get", "join", "remove", *self.leader_handlers):
                if inner in SERVICE_HANDLERS:
                    # This daemon is starting (its cluster member answers before the service that
                    # serves `inner` is up): nothing was done, the sender asks again. A BadInput
                    # here once told the console a create that an earlier try had made was bad input.
                    raise NotLeader(f"this member is starting: {inner!r} is not served yet; nothing was done")
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
        if method.startswith("cluster.datakey."):
            self._drv()
            return await self.datakey_peer_request(frm, method, params)
        for prefix, handler in self.peer_handlers.items():
            if method.startswith(prefix):
                return await handler(frm, method, params)
        raise BadInput(f"unknown peer method {method!r}", field="method")


def create_service(ctx: Any) -> ClusterService:
    return ClusterService(ctx)
