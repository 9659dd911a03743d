"""ObserveService: `/metrics` for Prometheus, the node's event watcher and `events.list`.

The HTTP side is prometheus_client's WSGI app in a thread of its own. At each scrape the
collector (in that thread) asks the event loop for a snapshot, so the daemon's state is read
where it lives, consistently, and a wedged loop shows as a failed scrape. Whatever is slow
(the data plane's describe(), its volume list, the network sample) is refreshed by the
watcher in the background; a scrape only reads the kernel's block counters (or one SPDK
`bdev_get_iostat`) and the in-memory state.

Where it listens (`metrics_listen`): HOST:PORT, or `off`. Default: the peer (management)
address's host on DEFAULT_PORT, else loopback (also when the peer address is a storage
address or a wildcard); an explicit address in `storage_address` is refused. The HTTP server
bounds idle connections and threads (nodeos/observe/httpd.py). A port
that cannot be bound is logged and shown in `nodeos status`; the daemon keeps serving storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, make_wsgi_app
from prometheus_client.core import Metric

from nodeos import __version__
from nodeos.cluster import events as map_events
from nodeos.cluster.errors import OutcomeUnknown
from nodeos.daemon.logsetup import fields
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.errors import BadInput, NodeosError
from nodeos.observe import events as ev
from nodeos.observe import iostat, metrics, sources
from nodeos.observe.httpd import BoundedServer, BoundedV6Server, QuietHandler
from nodeos.observe.journal import log_event

log = logging.getLogger("nodeosd.observe")

DEFAULT_PORT = 9810
WILDCARDS = ("0.0.0.0", "::", "", "*")  # listen on every address: never chosen implicitly
WATCH_S = 1.0  # cluster and data plane readings for events and the leader-change counter
# Watcher rounds between slow refreshes (describe, volume list, network): the volume list is an
# `lvs`, 0.7 s of CPU in a lab VM (TCG), so every 5 s it was a seventh of the node's CPU.
SLOW_EVERY = 15
SNAPSHOT_TIMEOUT_S = 10.0
SLOW_READ_S = 30.0  # the data plane's describe and volume list for a scrape
FOLLOW_MAX_S = 300.0
DOWN_AFTER_S = 3.0  # a member silent this long counts as failed (see sources.hold_liveness)
PROPOSE_TIMEOUT_S = 5.0
# What the node proposes to the map's log itself: what happens outside the map. Everything
# else it notices (members joining, rebuilds, its data plane, its drives) the map records
# while applying the change, so proposing it too would log it twice.
PROPOSED_KINDS = (
    "leader_changed",
    "node_failed",
    "node_recovered",
    "drift_found",
    "drift_cleared",
)


def listen_address(cfg: dict[str, Any], peer: tuple[str, int] | None) -> tuple[str, int] | None:
    """Where /metrics listens (None: off), from the merged daemon config."""
    from nodeos import validate

    raw = cfg.get("metrics_listen")
    if raw == "off":
        return None
    storage = cfg.get("storage_address") or []
    if raw:
        host, port = validate.host_port(raw, "metrics_listen")
        if host in storage:
            raise BadInput(
                f"metrics_listen {host} is a storage address: use a management address (or off)",
                field="metrics_listen",
            )
        return host, port
    if peer is not None and peer[0] not in storage and peer[0] not in WILDCARDS:
        return peer[0], DEFAULT_PORT
    # No management address known apart from the storage network's (a wildcard peer address
    # is every address, the storage network's too): loopback only.
    return "127.0.0.1", DEFAULT_PORT


class _Collector:
    def __init__(self, svc: ObserveService) -> None:
        self.svc = svc

    def collect(self) -> Iterator[Metric]:
        loop = self.svc.loop
        assert loop is not None
        fut = asyncio.run_coroutine_threadsafe(self.svc.snapshot(), loop)
        yield from metrics.families(fut.result(timeout=SNAPSHOT_TIMEOUT_S))


class ObserveService:
    name = "observe"

    def __init__(self, ctx: Any, address: tuple[str, int] | None) -> None:
        self.ctx = ctx
        self.address = address
        self.started_at = time.time()
        cap = ctx.config.get("metrics_volume_labels_max")
        self.volume_labels_max = metrics.DEFAULT_VOLUME_LABELS_MAX if cap is None else int(cap)
        self.ring = ev.EventRing()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        ProcessCollector(namespace="nodeosd", registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.server: WSGIServer | None = None
        self.listen_error: str | None = None
        self.scrapes = 0
        self.leader_changes = 0
        self._prev: dict[str, Any] = {}
        self._describe: dict[str, Any] | None = None
        self._dp_error: str | None = None
        self._slow_read: asyncio.Future[Any] | None = None  # the data plane read under way
        self._devices: dict[str, str] = {}  # vol_id -> block device (kernel) or bdev name (spdk)
        self._net: dict[str, Any] | None = None
        self._new_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._down_since: dict[Any, float] = {}
        self._limit = ev.RateLimit()
        self._leader_term: tuple[Any, int] = (None, 0)  # (cluster, term) this node last recorded leading
        self._last_leader: Any = None
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=ev.DEFAULT_KEEP)
        self._sender: asyncio.Task[None] | None = None

    # --- Service protocol ---
    def methods(self) -> dict[str, Any]:
        return {"events.list": self.api_events}

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self._refresh_slow()
        self._prev = self._reading()
        if self.address is not None:
            host, port = self.address
            cls = BoundedV6Server if ":" in host else BoundedServer
            try:
                self.server = make_server(host, port, make_wsgi_app(self.registry), cls, QuietHandler)
            except OSError as exc:
                self.listen_error = f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                log.error("metrics: %s; /metrics is off", self.listen_error, extra=fields(metrics_port=port))
            else:
                threading.Thread(target=self.server.serve_forever, name="metrics-http", daemon=True).start()
                log.info("metrics on http://%s:%d/metrics", host, self.server.server_port)
        self._task = asyncio.create_task(self._watch())
        self._sender = asyncio.create_task(self._send_events())

    async def stop(self) -> None:
        await cancel_and_wait(self._task, self._sender)
        if self.server is not None:
            await asyncio.to_thread(self.server.shutdown)
            self.server.server_close()
            self.server = None

    def status(self) -> dict[str, Any]:
        url = None
        if self.server is not None and self.address is not None:
            url = f"http://{self.address[0]}:{self.server.server_port}/metrics"
        return {
            "metrics_url": url,
            "error": self.listen_error,
            "scrapes": self.scrapes,
            "events": self.ring.last_seq,
        }

    # --- readings ---
    def _cluster(self) -> dict[str, Any]:
        svc = (getattr(self.ctx, "services", None) or {}).get("cluster")
        try:
            return sources.cluster_view(svc)
        except Exception as exc:  # a half-started cluster service must not break the scrape
            log.debug("cluster view unavailable: %s", exc)
            return {"member": False}

    def _reading(self) -> dict[str, Any]:
        r: dict[str, Any] = {
            "cluster": sources.digest(self._cluster()),
            "dataplane_up": sources.dataplane_up(self._describe, self._dp_error),
            "dataplane_error": self._dp_error,
        }
        if self._net is not None:
            r["drift_items"] = self._net.get("drift_items")
        return r

    async def snapshot(self) -> dict[str, Any]:
        """Everything one scrape exports (runs in the event loop)."""
        self.scrapes += 1
        cluster = self._cluster()
        cluster["leader_changes"] = self.leader_changes
        api = getattr(self.ctx, "api_counters", None)
        counters = api() if callable(api) else {}
        dp = self.ctx.dataplane
        lanes = getattr(self.ctx, "lanes", None)
        return {
            "daemon": {
                "version": __version__,
                "start_time": self.started_at,
                "dataplane": {
                    "name": getattr(dp, "name", "none") if dp is not None else "none",
                    "up": sources.dataplane_up(self._describe, self._dp_error),
                    # Calls past their deadline, still in their worker (nodeos/daemon/lanes.py).
                    "stuck": [c.method for c in lanes.stuck()] if lanes is not None else [],
                    "stuck_total": getattr(lanes, "stuck_total", 0),
                },
                "api_requests": counters.get("requests", 0),
                "api_errors": counters.get("errors", {}),
                "api_refused": {
                    "permission": counters.get("refused", 0),
                    "idle": counters.get("idle_closed", 0),
                    "busy": counters.get("busy_refused", 0),
                },
            },
            "cluster": cluster,
            "volume_io": await self._volume_io(),
            "net": self._net,
            "limits": {"volume_labels_max": self.volume_labels_max},
        }

    async def _volume_io(self) -> dict[str, dict[str, float]]:
        dp = self.ctx.dataplane
        if dp is None or not self._devices:
            return {}
        try:
            if getattr(dp, "name", "") == "spdk":
                result = await self.ctx.run_blocking(dp.rpc.call, "bdev_get_iostat", {})
                return iostat.parse_spdk_iostat(result or {}, {b: v for v, b in self._devices.items()})
            return await asyncio.to_thread(iostat.read_block_stats, dict(self._devices))
        except Exception as exc:  # counters missing for one scrape beat a failed scrape
            log.debug("volume counters unavailable: %s", exc)
            return {}

    async def _refresh_slow(self) -> None:
        dp = self.ctx.dataplane
        if dp is not None and getattr(dp, "name", "none") != "none" and self.ctx.run_blocking is not None:
            try:
                # A thread of its own with a bound, never the data plane's lanes: a scrape's `lvs`
                # must not queue behind (or hold up) the node's work (issue 25); one read at a time.
                if self._slow_read is not None and not self._slow_read.done():
                    raise TimeoutError("the previous data plane read has not returned")
                self._slow_read = asyncio.ensure_future(asyncio.to_thread(_read_dataplane, dp))
                self._slow_read.add_done_callback(lambda f: f.cancelled() or f.exception())
                describe, vols = await asyncio.wait_for(asyncio.shield(self._slow_read), SLOW_READ_S)
                self._describe, self._dp_error = dict(describe), None
                self._devices = {v.vol_id: v.device for v in vols if v.device}
            except Exception as exc:
                self._dp_error = str(exc) or type(exc).__name__
        else:
            self._describe, self._dp_error = {}, None
        net_cfg = self.ctx.config.get("net_config")
        if net_cfg:
            self._net = await asyncio.to_thread(_sample_net, str(net_cfg))

    async def _watch(self) -> None:
        rounds = 0
        while True:
            await asyncio.sleep(WATCH_S)
            rounds += 1
            try:
                if rounds % SLOW_EVERY == 0:
                    await self._refresh_slow()
                cur = self._reading()
                now = time.time()
                sources.hold_liveness(cur, self._down_since, time.monotonic(), DOWN_AFTER_S)
                if self._prev.get("cluster", {}).get("leader") != cur["cluster"].get("leader"):
                    self.leader_changes += cur["cluster"].get("leader") is not None
                for e in sources.changes(self._prev, cur, now):
                    self._noticed(e, cur["cluster"])
                self._new_leader(cur["cluster"], now)
                for e in self._limit.flush(time.monotonic()):
                    self._propose(e)
                self._prev = cur
            except Exception:
                log.exception("observe watcher round failed")

    # --- events ---
    def record(self, event: dict[str, Any], journal: bool = True) -> dict[str, Any]:
        """Keep an event in the node's own log (and the journal unless the map's log takes it)."""
        rec = self.ring.add(event)
        if journal:
            log_event(rec)
        self._new_event.set()
        self._new_event = asyncio.Event()
        return rec

    def _noticed(self, e: dict[str, Any], cluster: dict[str, Any]) -> None:
        """An event this node's watcher derived: its own log, and the map's for what the map
        cannot see itself (a member going silent, drift), rate-limited per source."""
        member = bool(cluster.get("member")) and self._cluster_service() is not None
        kind = e["kind"]
        if e.get("node") is None and cluster.get("node_id") is not None:
            e = {**e, "node": cluster["node_id"]}  # drift, data plane: this node's own
        self.record(e, journal=not member)
        if member and kind in PROPOSED_KINDS and kind != "leader_changed":
            self._offer(f"{kind.split('_')[0]}:{e.get('node', '')}:{e.get('volume', '')}", e)

    def _new_leader(self, cur: dict[str, Any], now: float) -> None:
        """The new leader records its term in the map's log, once per term."""
        me, term, cid = cur.get("node_id"), int(cur.get("term") or 0), cur.get("cluster_id")
        before = self._last_leader
        if cur.get("leader") is not None:
            self._last_leader = cur.get("leader")
        if not cur.get("member") or cur.get("leader") != me or cid is None:
            return
        # A node that formed or joined another cluster starts counting terms again.
        if self._leader_term[0] == cid and term <= self._leader_term[1]:
            return
        self._leader_term = (cid, term)
        why = f"after node {before}" if before not in (None, me) else "elected"
        msg = f"node {me} leads, term {term} ({why})"
        self._offer("leader", ev.make_event("leader_changed", msg, at=now, node=me, term=term))

    def _offer(self, source: str, e: dict[str, Any]) -> None:
        allowed = self._limit.offer(source, e, time.monotonic())
        if allowed is not None:
            self._propose(allowed)

    def _cluster_service(self) -> Any:
        return (getattr(self.ctx, "services", None) or {}).get("cluster")

    def _propose(self, e: dict[str, Any]) -> None:
        try:
            self._outbox.put_nowait(e)
        except asyncio.QueueFull:
            log_event(e)  # the map's log is out of reach for long: the journal still has it

    async def _send_events(self) -> None:
        """Propose noticed events to the map's log in order; one that cannot be committed
        goes to this node's journal instead (its own log already has it)."""
        while True:
            e = await self._outbox.get()
            svc = self._cluster_service()
            try:
                if svc is None:
                    raise BadInput("no cluster service", field="cluster")
                await svc.at_leader("command", {"cmd": "record_event", "args": e}, PROPOSE_TIMEOUT_S)
            except OutcomeUnknown as err:
                # It may still commit, and then the leader journals it: not journaled here too.
                log.warning("event %s may not be in the cluster log: %s", e["kind"], err.message)
            except NodeosError as err:
                log.warning("event %s not in the cluster log: %s", e["kind"], err.message)
                log_event(e)
            except Exception:
                log.exception("event %s not in the cluster log", e["kind"])
                log_event(e)

    def _events(self, scope: str, since: int, limit: int) -> tuple[str, list[dict[str, Any]], int]:
        state = self._cluster().get("map") or {}
        if scope == "cluster" or (scope == "auto" and map_events.has_section(state)):
            log_ = map_events.list_events(state, since)
            last = int((state.get(map_events.SECTION) or {}).get("next_seq", 1)) - 1
            return "cluster", log_[:limit], last
        return "node", self.ring.since(since, limit), self.ring.last_seq

    async def api_events(self, params: dict[str, Any]) -> dict[str, Any]:
        since = ev.check_since(params.get("since"))
        scope = params.get("scope", "auto")
        if scope not in ("auto", "cluster", "node"):
            raise BadInput(
                f"scope {scope!r} is not known", field="scope", allowed=["auto", "cluster", "node"]
            )
        limit = params.get("limit", 1000)
        if type(limit) is not int or not 1 <= limit <= 10000:
            raise BadInput("limit must be an integer in [1, 10000]", field="limit")
        follow = params.get("follow", False)
        if not isinstance(follow, bool):
            raise BadInput("follow must be true or false", field="follow")
        wait = params.get("timeout", 30.0)
        if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 < wait <= FOLLOW_MAX_S:
            raise BadInput(f"timeout must be a number of seconds in (0, {FOLLOW_MAX_S:.0f}]", field="timeout")
        source, out, last = self._events(scope, since, limit)
        deadline = time.monotonic() + float(wait)
        # follow: hold the request until something newer than `since` exists (long poll).
        while follow and not out and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_event.wait(), min(left, 0.5))
            source, out, last = self._events(scope, since, limit)
        return {"source": source, "events": out, "last_seq": max([last, *(e["seq"] for e in out)])}


def _sample_net(path: str) -> dict[str, Any] | None:
    """Counters and drift of the configured network (the same sample `nodeos net watch` takes)."""
    from nodeos.net.model import load_config
    from nodeos.net.observe import observe
    from nodeos.net.verify import verify
    from nodeos.net.watch import sample

    try:
        cfg = load_config(path)
        s = sample(cfg)
        drift, _plan = verify(cfg, observe(cfg))
    except Exception as exc:
        log.warning("network sample failed: %s", exc)
        return None
    return {"nic": s.nic, "rdma": s.rdma, "drift_items": len(drift)}


def create_service(ctx: Any) -> ObserveService:
    return ObserveService(ctx, listen_address(ctx.config, ctx.peer_listen))


def _read_dataplane(dp: Any) -> tuple[Any, Any]:
    return dp.describe(), dp.list_volumes()
