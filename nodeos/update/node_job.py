"""A node's side of the rolling upgrade: it is handed a bundle by the leader, copies it from the
node that holds it over the storage network (the peer transport, authenticated and encrypted),
checks its SHA-256, and runs the one-node update (`nodeos node update`, nodeos/cli/update.py:
signature, architecture and version checks, RAUC writes the other slot, the reboot) as a
process of its own, exactly as an operator would on that node.

Peer methods (answered by every member; nodeos/cluster/service.py routes `update.*` here):
- `update.status`: this node's boot id, release and the job's phase (idle, copying, installing,
  rebooting, failed) with the error of a failed one;
- `update.install {id, version, sha256, size, source, allow_downgrade}`: start the job (once per
  bundle: asked again, it answers with the job under way); the answer carries the boot id the
  node has now, so the leader can tell when it came back;
- `update.chunk {sha256, offset}`: up to CHUNK bytes of a bundle this node holds for the cluster.

Bundles are kept root-only under `<state-dir>/update/cluster-<sha256>.raucb`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import nodeos
from nodeos.errors import BadInput, NotFound, OperationFailed

LOG = logging.getLogger("nodeosd.update")
CHUNK = 1 << 20
CHUNK_TIMEOUT_S = 30.0
KEEP_FRESH_S = 600.0  # a bundle kept this recently is never tidied away
UPDATE_TIMEOUT_S = 3600.0  # the one-node update: verify, write a slot (a few GiB)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def bundle_path(state_dir: Path, sha256: str) -> Path:
    return state_dir / "update" / f"cluster-{sha256}.raucb"


def _sha(params: dict[str, Any]) -> str:
    sha = params.get("sha256")
    if not isinstance(sha, str) or not _HEX64.match(sha):
        raise BadInput("sha256 must be 64 lowercase hex digits", field="sha256")
    return sha


class NodeJob:
    """The update job of this node (at most one at a time)."""

    def __init__(
        self, state_dir: Path, request: Any, keyring: str | None, nodeos_cmd: list[str] | None = None
    ):
        self.state_dir = state_dir
        self.request = request  # async (node_id, method, params, timeout) -> answer: the peer transport
        self.keyring = keyring
        self.cmd = nodeos_cmd or [str(Path(sys.executable).parent / "nodeos")]
        self.phase = "idle"
        self.error: str | None = None
        self.sha256: str | None = None
        self.task: asyncio.Task[None] | None = None

    def forget_bundles(self) -> list[str]:
        """Remove the bundles kept for the cluster (hundreds of MiB each on the state partition)
        once no upgrade needs them; never while this node's own job copies or installs one."""
        if self.phase in ("copying", "installing"):
            return []
        gone = []
        now = time.time()
        for p in sorted((self.state_dir / "update").glob("cluster-*.raucb")):
            with contextlib.suppress(FileNotFoundError):
                if now - p.stat().st_mtime < KEEP_FRESH_S:
                    continue  # just kept for an upgrade whose start may not be in the map yet
                p.unlink()
                gone.append(p.name)
        return gone

    def status(self) -> dict[str, Any]:
        return {
            "boot_id": boot_id(),
            "release": nodeos.__version__,
            "phase": self.phase,
            "error": self.error,
            "sha256": self.sha256,
        }

    async def handle(self, frm: int, method: str, params: dict[str, Any]) -> Any:
        if method == "update.status":
            return self.status()
        if method == "update.install":
            return self.install(params)
        if method == "update.chunk":
            return await asyncio.to_thread(self.chunk, params)
        raise BadInput(f"unknown peer method {method!r}", field="method")

    def chunk(self, params: dict[str, Any]) -> dict[str, Any]:
        sha = _sha(params)
        off = params.get("offset")
        p = bundle_path(self.state_dir, sha)
        if type(off) is not int or off < 0:
            raise BadInput("offset must be a non-negative integer", field="offset")
        if not p.exists():
            raise NotFound(f"this node holds no bundle {sha[:12]}", field="sha256")
        with open(p, "rb") as f:
            f.seek(off)
            return {"data": f.read(CHUNK)}

    def install(self, params: dict[str, Any]) -> dict[str, Any]:
        sha = _sha(params)
        size, source = params.get("size"), params.get("source")
        if type(size) is not int or size <= 0 or type(source) is not int:
            raise BadInput("size (> 0) and source (a node id) are required", field="size")
        if self.task is not None and not self.task.done():
            if self.sha256 != sha:
                raise OperationFailed(
                    f"an update to another bundle is under way ({self.phase})", field="sha256"
                )
            return self.status()
        if self.sha256 == sha and self.phase in ("rebooting",):
            return self.status()
        self.sha256, self.phase, self.error = sha, "copying", None
        allow = bool(params.get("allow_downgrade"))
        self.task = asyncio.create_task(self._run(sha, size, source, allow))
        return self.status()

    async def _run(self, sha: str, size: int, source: int, allow_downgrade: bool) -> None:
        try:
            path = await self._fetch(sha, size, source)
            self.phase = "installing"
            await self._update(path, allow_downgrade)
            self.phase = "rebooting"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure is the job's answer to the leader
            self.phase = "failed"
            self.error = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            LOG.error("update to bundle %s failed: %s", sha[:12], self.error)

    async def _fetch(self, sha: str, size: int, source: int) -> Path:
        """The bundle from `source` (or already here), checked against its SHA-256."""
        path = bundle_path(self.state_dir, sha)
        if path.exists() and await asyncio.to_thread(file_sha256, path) == sha:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        tmp = path.with_suffix(f".part{os.getpid()}")
        h = hashlib.sha256()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                off = 0
                while off < size:
                    got = await self.request(
                        source, "update.chunk", {"sha256": sha, "offset": off}, CHUNK_TIMEOUT_S
                    )
                    data = got.get("data") if isinstance(got, dict) else None
                    if not isinstance(data, bytes) or not data:
                        raise OperationFailed(f"node {source} sent no data at offset {off} of {size}")
                    out.write(data)
                    h.update(data)
                    off += len(data)
            if off != size or h.hexdigest() != sha:
                raise OperationFailed(f"the bundle copied from node {source} does not match its SHA-256")
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return path

    async def _update(self, path: Path, allow_downgrade: bool) -> None:
        args = [*self.cmd, "node", "update", str(path), "--json", "--state-dir", str(self.state_dir)]
        if self.keyring:
            args += ["--keyring", self.keyring]
        if allow_downgrade:
            args.append("--allow-downgrade")
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), UPDATE_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            raise OperationFailed(
                f"`nodeos node update` did not end within {UPDATE_TIMEOUT_S:.0f} s"
            ) from None
        if proc.returncode == 0:
            return
        try:
            why = json.loads(out.decode())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            why = (err or out).decode(errors="replace").strip()[-500:]
        raise OperationFailed(f"`nodeos node update` refused or failed (exit {proc.returncode}): {why}")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
