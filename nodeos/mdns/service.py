"""The nodeosd service that advertises the node's discovery controller over mDNS (issue 28).

A loop of its own, apart from the agent: every POLL_S it gathers the node's facts (its
listeners, whether it is draining, serving, its data plane up; the interfaces' addresses as
they are now, read every ADDR_POLL_S on a thread of its own), decides the records
(nodeos/mdns/plan.py, pure) and, when they differ from what is advertised, hands them to the
publisher (nodeos/mdns/publisher.py), which answers within a bound. Drain, undrain, a data
plane that goes down or comes back, an address that goes or moves: followed within a poll.
A failing publisher is retried with a growing pause, said once as an event (`mdns_failed`,
`mdns_recovered`), counted in /metrics, shown in `nodeos status`; it never blocks, fails or
restarts the daemon. Stop: goodbyes for everything first (it stops before every other
service: last in SERVICE_FACTORIES).

Config (nodeosd.toml): `mdns` (default true) and `mdns_management` (default false).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from nodeos import tlskey, validate
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.mdns.plan import Decision, Facts, Options, decide
from nodeos.mdns.publisher import Publisher, ZeroconfPublisher

LOG = logging.getLogger("nodeosd.mdns")
POLL_S = 1.0
ADDR_POLL_S = 5.0
ADDR_READ_TIMEOUT_S = 5.0
RETRY_MIN_S = 2.0
RETRY_MAX_S = 60.0
WILDCARDS = ("0.0.0.0", "::", "")


def create_service(ctx: Any) -> MdnsService:
    return MdnsService(ctx)


def read_interfaces() -> tuple[tuple[str, str], ...]:
    """(interface, address) of every address the kernel holds now (getifaddrs, no subprocess)."""
    import ifaddr  # python-zeroconf's own dependency (Debian: python3-ifaddr)

    out: list[tuple[str, str]] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            addr = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            out.append((str(adapter.nice_name), str(addr)))
    return tuple(out)


def options_of(cfg: dict[str, Any]) -> Options:
    return Options(enabled=bool(cfg.get("mdns", True)), management=bool(cfg.get("mdns_management", False)))


def management_addresses(cfg: dict[str, Any]) -> frozenset[str]:
    """The hosts of the peer, REST and metrics listen addresses (a wildcard names no interface)."""
    out = set()
    for key in ("peer_listen", "rest_listen", "metrics_listen"):
        raw = cfg.get(key)
        if not raw or raw == "off":
            continue
        try:
            host = validate.host_port(raw, key)[0]
        except Exception:
            continue
        if host not in WILDCARDS:
            out.add(host)
    return frozenset(out)


def _management_interface(path: str | None) -> frozenset[str]:
    if not path:
        return frozenset()
    from nodeos.net.model import load_config

    try:
        name = load_config(path).management.interface
    except Exception as exc:
        LOG.warning("mDNS: network config %s unreadable (%s): no management interface known", path, exc)
        return frozenset()
    return frozenset({name}) if name else frozenset()


class MdnsService:
    name = "mdns"

    def __init__(
        self,
        ctx: Any,
        publisher: Callable[[], Publisher] = ZeroconfPublisher,
        interfaces: Callable[[], tuple[tuple[str, str], ...]] = read_interfaces,
    ) -> None:
        self.ctx = ctx
        self.opts = options_of(ctx.config)
        self._make_publisher = publisher
        self._read_interfaces = interfaces
        self.publisher: Publisher | None = None
        self.decision = Decision(frozenset(), ("not started",))
        self.problems: list[str] = []
        self.failures = 0  # changes that did not (fully) take
        self.changes = 0
        self._task: asyncio.Task[None] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nodeos-mdns-addrs")
        self._ifaces: tuple[tuple[str, str], ...] = ()
        self._ifaces_at = -ADDR_POLL_S
        self._ifaces_read: asyncio.Future[Any] | None = None
        self._mgmt_ifaces: frozenset[str] = frozenset()
        self._mgmt_addrs = management_addresses(ctx.config)
        self._retry_at = 0.0
        self._pause = RETRY_MIN_S

    # --- Service protocol ---
    def methods(self) -> dict[str, Any]:
        return {}

    async def start(self) -> None:
        if not self.opts.enabled:
            self.decision = decide(self._facts(), self.opts)
            LOG.info("mDNS advertisement is off (mdns = false)")
            return
        loop = asyncio.get_running_loop()
        path = self.ctx.config.get("net_config")
        self._mgmt_ifaces = await loop.run_in_executor(self._pool, _management_interface, path)
        self.publisher = self._make_publisher()
        self._register_metrics()
        self._task = asyncio.create_task(self._run(), name="mdns")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        if self.publisher is not None:
            await self.publisher.close()  # goodbyes (bounded)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def status(self) -> dict[str, Any]:
        adv = self.publisher.advertised() if self.publisher is not None else frozenset()
        return {
            "enabled": self.opts.enabled,
            "management": self.opts.management,
            "advertised": [
                {"interface": a.interface, "p": a.protocol, "addresses": list(a.addresses), "port": a.port}
                for a in sorted(adv)
            ],
            "notes": list(self.decision.notes),
            "problems": list(self.problems),
            "failures": self.failures,
        }

    # --- the loop ---
    async def _run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception:  # a bug here must not end the loop (nor touch the daemon)
                LOG.exception("mDNS reconcile failed")
            await asyncio.sleep(POLL_S)

    async def reconcile(self) -> None:
        """One pass: facts -> records -> the publisher, when they differ (and a retry is due)."""
        assert self.publisher is not None
        await self._refresh_interfaces()
        self.decision = decide(self._facts(), self.opts)
        want = self.decision.adverts
        if want == self.publisher.advertised() and not self.problems:
            return
        now = time.monotonic()
        if self.problems and now < self._retry_at:
            return
        self.changes += 1
        problems = await self.publisher.apply(want)
        if problems:
            self.failures += 1
            if not self.problems:
                self._event("mdns_failed", "warning", "mDNS advertisement failed: " + "; ".join(problems))
            LOG.warning("mDNS: %s (again in %.0f s)", "; ".join(problems), self._pause)
            self._retry_at = now + self._pause
            self._pause = min(self._pause * 2, RETRY_MAX_S)
        elif self.problems:
            self._event("mdns_recovered", "info", f"mDNS advertisement recovered: {len(want)} service(s)")
            self._pause = RETRY_MIN_S
        self.problems = problems

    async def _refresh_interfaces(self) -> None:
        """The interfaces' addresses, read on this service's own thread, at most every ADDR_POLL_S;
        a read that has not returned keeps the last ones (said in the notes)."""
        now = time.monotonic()
        if now - self._ifaces_at < ADDR_POLL_S:
            return
        if self._ifaces_read is None or self._ifaces_read.done():
            loop = asyncio.get_running_loop()
            self._ifaces_read = loop.run_in_executor(self._pool, self._read_interfaces)
        try:
            self._ifaces = await asyncio.wait_for(asyncio.shield(self._ifaces_read), ADDR_READ_TIMEOUT_S)
            self._ifaces_at = now
        except Exception as exc:
            LOG.warning("mDNS: the interfaces' addresses were not read (%r); keeping the last ones", exc)

    def _facts(self) -> Facts:
        node = (self.ctx.services or {}).get("node")
        dp = self.ctx.dataplane
        svcid = getattr(dp, "discovery_svcid", None) if dp is not None else None
        listeners = node.listeners_json() if node is not None and hasattr(node, "listeners_json") else []
        return Facts(
            node_name=self.ctx.node_name,
            listeners=tuple((str(li.get("trtype")), str(li.get("traddr"))) for li in listeners),
            interfaces=self._ifaces,
            discovery_port=int(svcid) if svcid else None,
            nqn=validate.DISCOVERY_NQN,
            serving=_serving(node, _plain_discovery_only(dp), _hosts(self.ctx.services.get("cluster"))),
            draining=_draining(self.ctx.services.get("cluster")),
            dataplane_down=_down(node),
            management_addresses=self._mgmt_addrs,
            management_interfaces=self._mgmt_ifaces,
            node_id=str(getattr(self.ctx, "node_id", "") or ""),
        )

    def _event(self, kind: str, severity: str, message: str) -> None:
        obs = (self.ctx.services or {}).get("observe")
        if obs is None:
            return
        try:
            from nodeos.observe.events import make_event

            obs.record(make_event(kind, message[:500], severity=severity, reason="mdns"))
        except Exception as exc:  # an event that cannot be kept is logged, never raised
            LOG.warning("mDNS event not recorded: %s", exc)

    def _register_metrics(self) -> None:
        registry = getattr((self.ctx.services or {}).get("observe"), "registry", None)
        if registry is not None:
            registry.register(_Metrics(self))


def _plain_discovery_only(dp: Any) -> bool:
    """The kernel target links a volume to its plain discovery port only when the volume takes
    plain text (a TLS-only one would take plain-text I/O there: dataplane/kernel/nvmet.py,
    discovery_addrs); SPDK's discovery subsystem listens beside every export's ports."""
    return getattr(dp, "name", None) == "kernel"


def _hosts(cluster: Any) -> dict[str, Any]:
    d = getattr(cluster, "driver", None)
    return dict(d.map.state.get("hosts") or {}) if d is not None else {}


def _serving(node: Any, plain_only: bool = False, hosts: dict[str, Any] | None = None) -> bool:
    """Whether the node keeps its discovery controller. On the kernel target (`plain_only`):
    while its discovery ports refer hosts to other nodes (they are anchored then, exporting or
    not: nodeos/dataplane/kernel/nvmet.py, ANCHOR_NQN), or while it exports something a host may
    reach in plain text (a volume that requires TLS is not linked to the plain discovery port).
    On SPDK: while it exports something."""
    if node is None or not hasattr(node, "records"):
        return False
    refers = getattr(getattr(node, "agent", None), "refers_hosts", None)
    if plain_only and callable(refers) and refers():
        return True
    try:
        vols = node.records()[1]
        if not plain_only and vols:
            return True
        if any(tlskey.volume_policy(v.get("hosts") or [], hosts or {}) != "required" for v in vols.values()):
            return True
    except Exception:
        return False
    published = getattr(getattr(node, "agent", None), "published", None)
    return bool(getattr(published, "copies", None))


def _draining(cluster: Any) -> bool:
    d = getattr(cluster, "driver", None)
    if d is None:
        return False
    return (d.map.state["nodes"].get(d.id) or {}).get("state") == "draining"


def _down(node: Any) -> bool:
    fn = getattr(node, "dataplane_down", None)
    return bool(fn()) if callable(fn) else False


class _Metrics:
    """/metrics of mDNS (a collector on the observe service's registry; read from its thread)."""

    def __init__(self, svc: MdnsService) -> None:
        self.svc = svc

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        svc = self.svc
        adv = GaugeMetricFamily(
            "nodeos_mdns_advertised",
            "Discovery services advertised over mDNS (TP8009), by interface and TXT p",
            labels=["interface", "protocol"],
        )
        for a in sorted(svc.publisher.advertised() if svc.publisher is not None else ()):
            adv.add_metric([a.interface, a.protocol], 1)
        yield adv
        yield GaugeMetricFamily(
            "nodeos_mdns_ok",
            "1 while mDNS advertises what the node should, 0 while a change fails",
            value=0 if svc.problems else 1,
        )
        yield CounterMetricFamily(
            "nodeos_mdns_failures",
            "mDNS changes that failed (retried with a growing pause)",
            value=svc.failures,
        )
