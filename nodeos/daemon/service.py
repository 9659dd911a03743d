"""How parts of nodeosd plug into the daemon.

A Service owns one area (the local node's volumes, the cluster, ...). The daemon starts
every service, routes each API method to the service that declared it, and stops them in
reverse order on SIGTERM. Handlers get the request's params and return a msgpack-safe
result or raise a NodeosError (sent back as `{code, message, field?, allowed?}`).

How the daemon finds services: each entry of `SERVICE_FACTORIES` ("module:function") is
imported at start; the function is called with a `DaemonContext` and returns a Service
(or None to stay out, e.g. when its configuration is absent). A module that is not installed
yet is skipped with a log line; any other error stops the daemon from starting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nodeos.dataplane.base import DataPlane
    from nodeos.store.lmdb_store import Store

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

# Order matters: services start in this order and stop in reverse.
# The cluster comes first: the node service reconciles from its map, the control API runs on it.
SERVICE_FACTORIES: list[str] = [
    "nodeos.cluster.service:create_service",
    "nodeos.node.service:create_service",
    "nodeos.control.service:create_service",
    "nodeos.update.service:create_service",  # the rolling upgrade: on the cluster, beside control
    "nodeos.observe:create_service",
    "nodeos.rest.service:create_service",
    # Last, so it stops first: its mDNS goodbyes go out while the node still serves.
    "nodeos.mdns.service:create_service",
]


class Service(Protocol):
    name: str

    def methods(self) -> dict[str, Handler]:
        """API methods, e.g. {"volume.create": self.volume_create}; names are "<area>.<verb>"."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def status(self) -> dict[str, Any]:
        """A msgpack-safe summary merged into `nodeos status` under the service's name."""
        ...


def service_failure(svc: Service) -> str | None:
    """Why a service cannot do its job now (optional method `failed()`); None when it can.

    While any service reports a failure the daemon says so in `nodeos status` and its
    systemd STATUS, and stops pinging the watchdog (systemd restarts it if it stays failed).
    """
    fn = getattr(svc, "failed", None)
    return fn() if callable(fn) else None


@dataclass
class DaemonContext:
    """What the daemon hands to every service factory.

    `store` is the node's own LMDB environment (sub-databases listed in
    nodeos.daemon.main.NODE_DBS). A service with state of its own (e.g. the Raft log) opens
    its own Store under `state_dir / <service name>`: one LMDB environment per directory and
    process, sub-databases fixed when it is opened.
    """

    node_id: str  # stable per state dir, hex uuid, created on first start
    node_name: str
    state_dir: Path
    store: Store
    dataplane: DataPlane | None  # None: witness (--dataplane none) or no usable data plane
    dataplane_reason: str  # why this data plane was chosen (shown by `nodeos status`)
    peer_listen: tuple[str, int] | None
    storage_addresses: list[str]
    config: dict[str, Any] = field(default_factory=dict)  # the merged config (flags over file)
    # Runs a blocking data plane call on its lane, within its deadline (nodeos/daemon/lanes.py).
    run_blocking: Callable[..., Awaitable[Any]] | None = None
    lanes: Any = None  # the Lanes behind run_blocking: which calls are stuck
    # Every service by name, filled once all are created and before any starts: collaborators
    # (control -> cluster, node -> cluster) and observers (nodeos.observe) find each other here.
    services: dict[str, Any] = field(default_factory=dict)
    api_counters: Callable[[], dict[str, Any]] | None = None
    # The API's dispatcher, for a second way in (the REST endpoint, nodeos/rest/): (method,
    # params) -> the reply map the socket would send, `{id, result}` or `{id, error}`.
    dispatch: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
