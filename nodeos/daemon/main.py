"""`nodeosd`: the storage node daemon.

Start-up order: config -> logging -> state dir lock -> LMDB store and node identity ->
data plane choice -> services (the node service finishes interrupted operations here) ->
API socket -> READY=1. SIGTERM/SIGINT: STOPPING=1, API closed, services stopped in reverse,
store closed, exit 0. Exit codes: 0 stopped cleanly, 1 could not start (environment),
2 bad configuration, 4 corrupt record in the node's state (e.g. its identity).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import importlib
import logging
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from nodeos import __version__, validate
from nodeos.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    BadInput,
    CorruptState,
    EnvironmentProblem,
    NodeosError,
)
from nodeos.store.lmdb_store import secure_dir

from . import config as configmod
from . import logsetup, preflight
from .api import ApiServer
from .lanes import Lanes
from .notify import Notifier
from .service import SERVICE_FACTORIES, DaemonContext, Service, service_failure
from .stopguard import StopDeadline, bounded_stop

LOG = logging.getLogger("nodeosd")
LOOP_STALL_WARN_S = 5.0  # a loop this late is logged; the watchdog kills at 2x its ping interval
EXIT_CORRUPT_STATE = 4  # a corrupt record in the node's own state: needs an operator, not a restart

# Sub-databases of the node's LMDB environment (state_dir/node).
NODE_DBS = ["meta", "pools", "volumes", "snapshots", "hosts", "intents"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nodeosd", description="nodeos storage node daemon")
    p.add_argument(
        "--config", default=None, help=f"TOML config file (default {configmod.DEFAULT_CONFIG}, may be absent)"
    )
    p.add_argument("--state-dir", dest="state_dir")
    p.add_argument("--api-socket", dest="api_socket")
    p.add_argument("--peer-listen", dest="peer_listen", metavar="HOST:PORT")
    p.add_argument("--dataplane", choices=configmod.DATAPLANES)
    p.add_argument("--spdk-socket", dest="spdk_socket")
    p.add_argument(
        "--storage-address",
        dest="storage_address",
        action="append",
        metavar="ADDR",
        help="address to export on (repeat for several); default: the node's non-loopback addresses",
    )
    p.add_argument("--node-name", dest="node_name")
    p.add_argument("--log-level", dest="log_level", choices=configmod.LOG_LEVELS)
    p.add_argument(
        "--metrics-listen",
        dest="metrics_listen",
        metavar="HOST:PORT|off",
        help="where /metrics listens (default: the peer address's host, port 9810)",
    )
    p.add_argument(
        "--net-config", dest="net_config", metavar="FILE", help="network profile sampled for metrics"
    )
    p.add_argument(
        "--rest-listen",
        dest="rest_listen",
        metavar="HOST:PORT",
        help="serve the API over HTTPS with bearer tokens here (default: off; docs/api.md)",
    )
    p.add_argument("--version", action="version", version=f"nodeosd {__version__}")
    return p.parse_args(argv)


def lock_state_dir(state_dir: Path) -> int:
    """One daemon per state dir: an flock held for the process's life. The dir is made 0700."""
    secure_dir(state_dir)
    fd = os.open(state_dir / "nodeosd.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise EnvironmentProblem(
            f"another nodeosd uses the state directory {state_dir}", field="state_dir"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def node_identity(store: Any, node_name: str) -> str:
    """The node id is made once per state dir and never changes."""
    with store.write() as txn:
        ident = txn.get("meta", "identity")
        if ident is None:
            ident = {"node_id": uuid.uuid4().hex, "created": time.time(), "node_name": node_name}
            txn.put("meta", "identity", ident)
        return str(ident["node_id"])


def default_storage_addresses() -> list[str]:
    """Global-scope addresses of the node's interfaces, loopback and link-local left out."""
    import ipaddress

    from nodeos.hw.addrs import interface_addresses  # not pyroute2: seconds of start-up, see there

    try:
        addrs = [a for _, a in interface_addresses()]
    except (OSError, ValueError) as exc:  # no `ip`: the operator sets --storage-address
        LOG.warning("cannot list the node's addresses: %s", exc)
        return []
    out: list[str] = []
    for a in addrs:
        try:
            ip = ipaddress.ip_address(a)
        except (TypeError, ValueError):
            continue
        if ip.is_loopback or ip.is_link_local or ip.is_multicast:
            continue
        if str(ip) not in out:
            out.append(str(ip))
    return out


def choose_dataplane(cfg: configmod.Config) -> tuple[Any, str]:
    """(data plane, why). `auto` with nothing usable leaves the node running as a witness."""
    try:
        from nodeos.dataplane.select import choose, choose_why
    except ImportError as exc:  # backends not installed in this build
        if cfg.dataplane == "none":
            return None, "witness (--dataplane none)"
        raise EnvironmentProblem(f"no data plane backends in this build: {exc}", field="dataplane") from None
    if cfg.dataplane == "none":
        return choose("none"), "witness (--dataplane none)"
    try:
        dp, why = choose_why(cfg.dataplane, cfg.spdk_socket, state_dir=Path(cfg.state_dir))
    except NodeosError as err:
        if cfg.dataplane != "auto":
            raise
        LOG.error("no usable data plane, running as a witness: %s", err.message)
        return choose("none"), f"auto found none usable: {err.message}"
    return dp, why


def load_services(ctx: DaemonContext) -> list[Service]:
    services: list[Service] = []
    for target in SERVICE_FACTORIES:
        module, attr = target.split(":")
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                LOG.info("service module %s is not installed; skipped", module)
                continue
            raise
        factory = getattr(mod, attr, None)
        if factory is None:
            LOG.info("service module %s has no %s(); skipped", module, attr)
            continue
        svc = factory(ctx)
        if svc is not None:
            services.append(svc)
    return services


class Daemon:
    def __init__(self, cfg: configmod.Config, cfg_source: str) -> None:
        self.cfg = cfg
        self.cfg_source = cfg_source
        self.notifier = Notifier()
        self.started = time.monotonic()
        self.services: list[Service] = []
        self.stop_event = asyncio.Event()
        self.lanes = Lanes()  # the data plane's workers (nodeos/daemon/lanes.py)
        self.ctx: DaemonContext | None = None
        self.api: ApiServer | None = None
        self.store: Any = None
        self._lock_fd: int | None = None
        self.deadline = StopDeadline()

    async def run_blocking(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self.lanes.run(fn, *args, **kwargs)

    async def start(self) -> None:
        from nodeos.store.lmdb_store import Store

        cfg = self.cfg
        state_dir = Path(cfg.state_dir)
        self._lock_fd = lock_state_dir(state_dir)
        self.store = Store(state_dir / "node", dbs=NODE_DBS)
        node_id = node_identity(self.store, cfg.node_name)
        self.notifier.status("choosing data plane")
        dp, why = await self.run_blocking(choose_dataplane, cfg)
        # A subprocess: ask from a thread, off the event loop.
        addrs = cfg.storage_address or await asyncio.to_thread(default_storage_addresses)
        peer = validate.host_port(cfg.peer_listen, "peer_listen") if cfg.peer_listen else None
        self.ctx = DaemonContext(
            node_id=node_id,
            node_name=cfg.node_name,
            state_dir=state_dir,
            store=self.store,
            dataplane=dp,
            dataplane_reason=why,
            peer_listen=peer,
            storage_addresses=addrs,
            config=cfg.to_dict(),
            run_blocking=self.run_blocking,
            lanes=self.lanes,
        )
        LOG.info(
            "nodeosd %s starting: node %s (%s), data plane %s (%s)",
            __version__,
            cfg.node_name,
            node_id,
            dp.name if dp is not None else "none",
            why,
            extra=logsetup.fields(node_id=node_id, dataplane=dp.name if dp is not None else "none"),
        )
        self.api = ApiServer(Path(cfg.api_socket))
        self.api.add_routes("daemon", {"status": self.api_status, "daemon.ping": self.api_ping})
        self.ctx.api_counters = self.api.counters
        self.ctx.dispatch = self.api.call
        self.services = load_services(self.ctx)
        self.ctx.services.update({svc.name: svc for svc in self.services})
        for svc in self.services:
            self.api.add_routes(svc.name, svc.methods())
        if self.api.undefined():  # every method is defined in nodeos/api/ (tests/unit/api)
            LOG.warning("API methods not defined in nodeos/api/: %s", ", ".join(self.api.undefined()))
        for svc in self.services:
            self.notifier.status(f"starting {svc.name}")
            await svc.start()
        await self.api.start()

    def status_line(self) -> str:
        failures = self.failures()
        if failures:
            return "FAILED: " + "; ".join(f"{k}: {v}" for k, v in sorted(failures.items()))
        dp = self.ctx.dataplane if self.ctx else None
        name = dp.name if dp is not None else "none"
        # `systemctl status` shows this line: a dead target must not read "ready" there either
        # (the watchdog stays: a restart would not bring the target back; nodeos/node/dpwatch.py).
        node = self.ctx.services.get("node") if self.ctx else None
        health = getattr(getattr(node, "dpwatch", None), "health", None)
        if health is not None and health.state == "down":
            return f"degraded: node {self.cfg.node_name}, data plane {name} DOWN: {health.reason}"
        return f"ready: node {self.cfg.node_name}, data plane {name}"

    async def api_ping(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True, "pid": os.getpid()}

    async def api_status(self, params: dict[str, Any]) -> dict[str, Any]:
        assert self.ctx is not None and self.api is not None
        dp = self.ctx.dataplane
        describe: dict[str, Any] = {}
        down = getattr(self.ctx.services.get("node"), "dataplane_down", lambda: None)()
        if dp is not None and down:
            describe = {"error": down}  # a hung target is not asked again: status answers at once
        elif dp is not None:
            try:  # bounded (lanes.DEADLINES_S): a target that hangs before the watch sees it
                describe = dict(await self.run_blocking(dp.describe))
            except Exception as exc:  # a dead SPDK must show in status, not break it
                describe = {"error": str(exc)}
        out: dict[str, Any] = {
            "node_id": self.ctx.node_id,
            "node_name": self.ctx.node_name,
            "version": __version__,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started, 1),
            "state_dir": str(self.ctx.state_dir),
            "api_socket": self.cfg.api_socket,
            "config_source": self.cfg_source,
            "peer_listen": self.cfg.peer_listen,
            "storage_addresses": self.ctx.storage_addresses,
            "dataplane": {
                **describe,
                "name": dp.name if dp is not None else "none",
                "reason": self.ctx.dataplane_reason,
            },
            "api": {
                "requests": self.api.requests,
                "bad_frames": self.api.bad_frames,
                "refused": self.api.refused,
            },
            "services": [s.name for s in self.services],
        }
        failures = self.failures()
        out["health"] = {"ok": not failures, "failures": failures}
        # First-boot provisioning (nodeos/provision): its last result, and an invalid
        # configuration's field and allowed values; absent on a node never provisioned.
        from nodeos.provision.state import summary as provision_summary

        prov = provision_summary(self.ctx.state_dir)
        if prov is not None:
            out["provision"] = prov
        for svc in self.services:
            try:
                out[svc.name] = svc.status()
            except Exception as exc:
                out[svc.name] = {"error": str(exc)}
        # One id space for operators: once the node is a cluster member, `node_id` is its member id,
        # the same id `cluster status` uses for `leader` and `members`. The daemon's own uuid stays
        # available as `node_uuid`.
        out["node_uuid"] = self.ctx.node_id
        cluster = out.get("cluster")
        if isinstance(cluster, dict) and cluster.get("member") and cluster.get("node_id") is not None:
            out["node_id"] = cluster["node_id"]
        return out

    def failures(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for svc in self.services:
            try:
                why = service_failure(svc)
            except Exception as exc:  # a failing health check is a failure too
                why = f"health check failed: {exc}"
            if why:
                out[svc.name] = why
        return out

    async def watchdog(self) -> None:
        """Ping systemd's watchdog while healthy; a failed service withdraws the pings.

        Pings come from the event loop itself, so a wedged loop stops them too. A service that
        recovers by itself (the cluster member restarts from disk) resumes them before systemd
        gives up on us; one that does not gets the daemon restarted.
        """
        interval = (self.notifier.watchdog_usec / 2e6) if self.notifier.watchdog_usec else 1.0
        failed: dict[str, str] = {}
        line = ""
        while True:
            now = self.failures()
            if now != failed:
                if now:
                    LOG.error("%s (watchdog withdrawn)", self.status_line())
                else:
                    LOG.info("recovered: %s", self.status_line())
                failed = now
            # A line systemd's queue had no room for is sent again next time (it changes rarely:
            # a dropped "DOWN" would read "ready" in `systemctl status` until the next change).
            if (now_line := self.status_line()) != line and self.notifier.status(now_line):
                line = now_line
            if not failed and self.notifier.watchdog_usec:
                self.notifier.watchdog()
            woke_at = time.monotonic() + interval
            await asyncio.sleep(interval)
            late = time.monotonic() - woke_at
            if late > LOOP_STALL_WARN_S:  # what ends in a watchdog kill says so beforehand
                LOG.warning("event loop stalled %.1f s (watchdog pings every %.1f s)", late, interval)

    async def stop(self) -> None:
        self.notifier.stopping()
        if self.api is not None:
            await bounded_stop("the API socket", self.api.stop())
        for svc in reversed(self.services):
            await bounded_stop(svc.name, svc.stop())
        self.lanes.shutdown()
        if self.store is not None:
            self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop_event.set)
        # Pinging during start-up too: recovery and re-exporting may take a while. Without a
        # systemd watchdog the task still watches the services' health for STATUS and the log.
        wd: asyncio.Task[None] | None = asyncio.create_task(self.watchdog())
        try:
            await self.start()
        except BaseException:
            if wd is not None:
                wd.cancel()
            self.deadline.arm()
            await self.stop()
            raise
        self.notifier.ready(self.status_line())
        LOG.info("%s; API on %s", self.status_line(), self.cfg.api_socket)
        await self.stop_event.wait()
        LOG.info("stopping on signal")
        self.deadline.arm()
        if wd is not None:
            wd.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await wd
        await self.stop()
        LOG.info("stopped")
        return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        cfg, source = configmod.load(args.config, overrides)
        preflight.check(cfg)  # before the state dir is made: a refused start changes nothing
    except NodeosError as err:
        print(f"nodeosd: {err.message}" + (f" (field: {err.field})" if err.field else ""), file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(err, BadInput) else EXIT_FAILED
    logsetup.setup(cfg.log_level)
    # Everything the daemon creates is its own (the state holds secrets), as under the unit's UMask.
    os.umask(0o077)
    daemon = Daemon(cfg, source)
    try:
        # The stop deadline, once armed, also covers asyncio.run's clean-up and the interpreter's
        # exit (both wait for pending tasks and worker threads).
        return asyncio.run(daemon.run())
    except NodeosError as err:
        LOG.error(
            "cannot start: %s", err.message, extra=logsetup.fields(field=err.field or "", code=err.code)
        )
        if isinstance(err, CorruptState):
            # Restarting cannot repair the record: exit with a code the unit does not restart on.
            return EXIT_CORRUPT_STATE
        return err.exit_code if err.exit_code != 0 else EXIT_FAILED
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
