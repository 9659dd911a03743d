"""How parts of nodeosd plug into the daemon.

A Service owns one area (the local node's volumes, the cluster, ...). The daemon starts
every service, routes each API method to the service that declared it, and stops them in
reverse order on SIGTERM. Handlers get the request's params and return a msgpack-safe
result or raise a NodeosError (sent back as `{code, message, field?, allowed?}`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


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
