"""The rolling cluster upgrade as a daemon service (`nodeos cluster upgrade`; docs/operations.md).

API (any member; the leader decides):
- `cluster.upgrade {bundle, dry_run, allow_downgrade}`: BUNDLE is a file on the node the request
  reaches. That node checks it as `nodeos node update --check` would (signature against the
  node's keyring, architecture, version), keeps a root-only copy for the other nodes to fetch, and
  asks the leader to start: the leader checks the cluster (rolling.precheck) and the order of the
  failure domains, and with `dry_run` only answers what it would do.
- `cluster.upgrade.status`, `.pause`, `.resume`, `.abort`.
Peer methods `update.*` are this node's side (nodeos/update/node_job.py); the leader's loop is
nodeos/update/upgrade_loop.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from nodeos.cluster.map import encode_command
from nodeos.cluster.upgrade_map import ACTIVE
from nodeos.daemon.service import DaemonContext, Handler
from nodeos.errors import BadInput, NotFound, OperationFailed
from nodeos.storage.failover_map import released_nodes
from nodeos.update import rolling
from nodeos.update.node_job import NodeJob, bundle_path, file_sha256
from nodeos.update.upgrade_loop import UpgradeLoop

LEADER_TIMEOUT_S = 20.0
TIDY_EVERY_S = 30.0
LOG = logging.getLogger("nodeosd.upgrade")
VERIFY_TIMEOUT_S = 600.0


class UpgradeService:
    name = "upgrade"

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx
        self.cluster: Any = None
        self.keyring = ctx.config.get("update_keyring") or None
        self.job: NodeJob | None = None
        self.loop: UpgradeLoop | None = None
        self._tidy: asyncio.Task[None] | None = None

    def methods(self) -> dict[str, Handler]:
        return {
            "cluster.upgrade": self.api_start,
            "cluster.upgrade.status": lambda p: self._leader({"op": "status"}),
            "cluster.upgrade.pause": lambda p: self._leader({"op": "paused"}),
            "cluster.upgrade.resume": lambda p: self._leader({"op": "running"}),
            "cluster.upgrade.abort": lambda p: self._leader({"op": "aborted"}),
        }

    async def start(self) -> None:
        self.cluster = self.ctx.services.get("cluster")
        if self.cluster is None:
            raise OperationFailed("the upgrade service needs the cluster service", field="cluster")
        self.job = NodeJob(self.ctx.state_dir, self._request, self.keyring)
        self.cluster.leader_handlers["upgrade"] = self._at_leader
        self.cluster.peer_handlers["update."] = self.job.handle
        self.loop = UpgradeLoop(self.cluster, self.job.status)
        self.loop.start()
        self._tidy = asyncio.create_task(self._tidy_loop())

    async def stop(self) -> None:
        if self._tidy is not None:
            self._tidy.cancel()
            await asyncio.gather(self._tidy, return_exceptions=True)
        if self.loop is not None:
            await self.loop.stop()
        if self.cluster is not None:
            self.cluster.leader_handlers.pop("upgrade", None)
            self.cluster.peer_handlers.pop("update.", None)

    def status(self) -> dict[str, Any]:
        return {"job": self.job.status() if self.job else None}

    async def _tidy_loop(self) -> None:
        """Every node drops its kept bundles once the map holds no upgrade that may still need
        them (running, paused or a stopped one that may resume)."""
        while True:
            await asyncio.sleep(TIDY_EVERY_S)
            d = getattr(self.cluster, "driver", None)
            up = (d.map.state.get("upgrade") if d is not None else None) or {}
            if d is not None and up.get("state") not in ACTIVE and self.job is not None:
                gone = await asyncio.to_thread(self.job.forget_bundles)
                if gone:
                    LOG.info("removed the bundle(s) kept for the cluster's upgrade: %s", ", ".join(gone))

    async def _request(self, to: int, method: str, params: dict[str, Any], timeout: float) -> Any:
        return await self.cluster.transport.request(to, method, params, timeout)

    async def _leader(self, params: dict[str, Any]) -> Any:
        return await self.cluster.at_leader(
            "upgrade", params, LEADER_TIMEOUT_S, idempotent=params["op"] == "status"
        )

    # --- on the node the operator asked ---
    async def api_start(self, params: dict[str, Any]) -> Any:
        bundle = params.get("bundle")
        if not isinstance(bundle, str) or not bundle:
            raise BadInput("bundle must be the path of a file on this node", field="bundle")
        src = Path(bundle)
        if not src.is_file():
            raise NotFound(f"no file {bundle} on this node", field="bundle")
        allow = bool(params.get("allow_downgrade"))
        verdict, sha, size = await asyncio.wait_for(
            asyncio.to_thread(self._check, src, allow), VERIFY_TIMEOUT_S
        )
        d = self.cluster.driver
        if d is None:
            raise OperationFailed("this node is not a cluster member", field="cluster")
        if not params.get("dry_run"):
            await asyncio.to_thread(self._keep, src, sha)
        out = await self._leader(
            {
                "op": "start",
                "version": verdict["version"],
                "bundle": {"sha256": sha, "size": size, "source": d.id},
                "allow_downgrade": allow,
                "dry_run": bool(params.get("dry_run")),
            }
        )
        return {**out, "bundle": {"path": bundle, "sha256": sha, "size": size, **verdict}}

    def _check(self, src: Path, allow: bool) -> tuple[dict[str, Any], str, int]:
        from nodeos.update.verify import DEFAULT_KEYRING, verify

        verdict, _ = verify(src, keyring=self.keyring or DEFAULT_KEYRING, allow_downgrade=allow)
        return verdict.to_dict(), file_sha256(src), src.stat().st_size

    def _keep(self, src: Path, sha: str) -> None:
        dst = bundle_path(self.ctx.state_dir, sha)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(dst.parent, 0o700)
        if dst.exists():
            os.utime(dst)  # fresh again: not tidied away before the upgrade's start is in the map
            return
        tmp = dst.with_suffix(".part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
        os.replace(tmp, dst)

    # --- at the leader ---
    async def _at_leader(self, d: Any, params: dict[str, Any], timeout: float) -> Any:
        await d.read_barrier(min(timeout, 5.0))
        st = d.map.state
        op = params.get("op")
        up = st.get("upgrade")
        if op == "status":
            return self._status(st, up)
        if op in ("paused", "running", "aborted"):
            if not up:
                raise NotFound("no upgrade has been started in this cluster", field="upgrade")
            await d.propose(encode_command("upgrade_state", {"id": up["id"], "state": op}), timeout)
            return self._status(d.map.state, d.map.state.get("upgrade"))
        if op != "start":
            raise BadInput(f"unknown upgrade operation {op!r}", field="op")
        voters = list(d.conf_state.voters)
        problems = rolling.precheck(st, params["version"], voters, bool(params.get("allow_downgrade")))
        domains = rolling.domains(st, voters, d.id)
        plan = {
            "version": params["version"],
            "domains": [
                {"name": x["name"], "nodes": [rolling.name_of(st, n) for n in x["nodes"]]} for x in domains
            ],
            "problems": problems,
        }
        if params.get("dry_run"):
            return {"dry_run": True, "ok": not problems, **plan}
        if problems:
            raise OperationFailed(
                "the cluster is not ready to upgrade: " + "; ".join(problems), field="cluster"
            )
        args = {
            "id": uuid.uuid4().hex[:12],
            "version": params["version"],
            "bundle": params["bundle"],
            "domains": domains,
            "allow_downgrade": bool(params.get("allow_downgrade")),
        }
        await d.propose(encode_command("upgrade_start", args), timeout)
        return {"dry_run": False, "ok": True, **plan, **self._status(d.map.state, d.map.state.get("upgrade"))}

    def _status(self, st: dict[str, Any], up: dict[str, Any] | None) -> dict[str, Any]:
        if not up:
            return {"upgrade": None}
        at = up["at"]
        dom = up["domains"][at]["name"] if at < len(up["domains"]) else None
        waiting = self.loop.last_wait if self.loop is not None and up["state"] == "running" else ""
        return {
            "upgrade": {
                "id": up["id"],
                "version": up["version"],
                "state": up["state"],
                "reason": up.get("reason"),
                "domain": dom,
                "step": up["step"] if dom else None,
                "done": at,
                "domains": len(up["domains"]),
                "waiting": waiting or None,
                "history": list(up.get("history") or [])[-10:],
                "releases": {
                    rolling.name_of(st, n): st["nodes"][n].get("release") for n in sorted(st["nodes"])
                },
                # nodes released for their update: their replicas out of sync by plan, legs cut
                "released": [rolling.name_of(st, n) for n in sorted(released_nodes(st))],
            }
        }


def create_service(ctx: DaemonContext) -> UpgradeService | None:
    return UpgradeService(ctx)
