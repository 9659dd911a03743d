"""Host handlers of the node service: registration by host NQN, optional DH-HMAC-CHAP secret."""

from __future__ import annotations

import time
from typing import Any

from nodeos import validate
from nodeos.daemon.logsetup import fields
from nodeos.errors import AlreadyExists, NotFound, OperationFailed

from . import crash, model
from .base import LOG, NodeBase, _param


class HostsMixin(NodeBase):
    # --- hosts ------------------------------------------------------------------------

    async def host_add(self, params: dict[str, Any]) -> dict[str, Any]:
        nqn = validate.host_nqn(_param(params, "nqn", "host"), "host")
        secret = validate.dhchap_secret(params.get("dhchap_secret"))
        async with self.lock:
            with self.store.write() as txn:
                if txn.get("hosts", nqn) is not None:
                    raise AlreadyExists(f"host {nqn!r} is already registered", field="host")
                rec = {"nqn": nqn, "dhchap_secret": secret, "added": time.time()}
                txn.put("hosts", nqn, rec)
            crash.point("host.add:done")
        LOG.info("host %s added", nqn, extra=fields(host=nqn, dhchap=bool(secret)))
        return model.public_host(rec)

    async def host_list(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        vols = self._all("volumes").values()
        return [
            dict(
                model.public_host(h),
                volumes=sorted(v["name"] for v in vols if h["nqn"] in v.get("hosts", [])),
            )
            for h in self._all("hosts").values()
        ]

    async def host_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        nqn = validate.host_nqn(_param(params, "nqn", "host"), "host")
        async with self.lock:
            with self.store.write() as txn:
                if txn.get("hosts", nqn) is None:
                    raise NotFound(f"host {nqn!r} is not registered", field="host")
                granted = sorted(v["name"] for _, v in txn.items("volumes") if nqn in v.get("hosts", []))
                if granted:
                    raise OperationFailed(
                        f"host {nqn!r} still has grants on {', '.join(granted)}; revoke them first",
                        field="host",
                    )
                txn.delete("hosts", nqn)
            crash.point("host.remove:done")
        LOG.info("host %s removed", nqn, extra=fields(host=nqn))
        return {"nqn": nqn, "removed": True}
