"""The node side of published volumes (issue 13): a collaborator of the agent.

For each published volume the map places on this node (nodeos/storage/publish_map.py):
- the local copy: on a seed (a node holding the snapshot) a thin clone of the snapshot; else
  a new LV filled from a joined replica the map names (`copy_from`), whose source export this
  node attaches over NVMe/TCP on the storage network (as a mirror's primary attaches legs) and
  reads with O_DIRECT (nodeos/node/pubcopy.py), throttled by the node's rebuild cap;
- a read-only dm view of the copy (at the mirror data offset for a replicated snapshot's
  clone): what every export of it serves. The target refuses writes, not the host's manners;
- the sha256 of every byte (computed while copying, or by reading a seed's view), reported;
- once the map has it in the path set (its sha256 equals the source's): the front end, the
  same NQN, serial, uuid and nguid on every node, ANA optimized, to the granted hosts; and a
  source export (`rep:` NQN) to the nodes the map says copy from here.
What the map no longer wants here (unpublished, or never placed) is torn down: exports,
attached source, view, LV. Copies run in worker threads, off the data plane queue.

A copy's progress is durable: every segment made durable in the LV has its sha256 recorded
in the node's store (`meta`, key `pubcopy/<uuid>`, with the size and segment length it was
made with). After a restart the copy resumes there (nodeos/node/pubcopy.py re-reads the
recorded prefix from the LV, keeping what still matches its digests, for the whole-volume
sum) from whichever joined replica the map names: every joined replica holds the same bytes.
A copy the map finds differing from the source, and a copy torn down, drop the record (a new
copy starts from zero). A seed's read of its own clone is not recorded: it reads it again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from nodeos import tlskey
from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, RemoteSpec
from nodeos.errors import NodeosError, NotSupported
from nodeos.node import model, pubcopy
from nodeos.node.replicas import node_host_id, node_host_nqn
from nodeos.storage.publish_map import section
from nodeos.store.lmdb_store import storage_error

LOG = logging.getLogger("nodeosd.agent")
LV_PREFIX = "pub"
CNTLID_SPAN = 1000  # per slot: 64 slots fit under nvmet's 0xFFEF
PROGRESS_DB = "meta"


def lv_name(uuid: str) -> str:
    return LV_PREFIX + uuid.replace("-", "")


def view_id(uuid: str) -> str:
    return names.view_id_for(names.mirror_id_for(uuid))


def progress_key(uuid: str) -> str:
    return f"pubcopy/{uuid}"


@dataclass
class Copy:
    """One published volume on this node, as this process knows it."""

    uuid: str
    state: str = "waiting"  # nodeos/storage/publish.py COPY_STATES
    progress: float | None = None
    resumed: float | None = None  # the fraction a restarted copy kept from its last run
    sha256: str | None = None
    error: str | None = None
    source: int | None = None  # the node being copied from
    device: str | None = None  # the read-only view every export serves
    task: asyncio.Task[None] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    exported: tuple[Any, ...] | None = None  # the front end / source exports applied
    connected: list[str] = field(default_factory=list)
    hosts: list[str] | None = None


class Published:
    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.node = agent.node
        self.copies: dict[str, Copy] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scanned = False

    # --- the pass --------------------------------------------------------------------------

    async def reconcile(self, st: dict[str, Any], me: int) -> bool:
        """Make this node's published copies match the map; True: retry soon."""
        pubs = {u: p for u, p in section(st).items() if any(s["node"] == me for s in p["placement"])}
        retry = False
        for uuid, pub in pubs.items():
            if pub["state"] == "unpublishing":
                continue
            try:
                retry |= await self._one(st, me, pub)
            except NodeosError as err:
                c = self.copies.setdefault(uuid, Copy(uuid))
                c.error = err.message
                LOG.error("published volume %s: %s", pub["name"], err.message)
                retry = True
        retry |= await self._gc(st, me, {u for u, p in pubs.items() if p["state"] != "unpublishing"})
        return retry

    def _visible(self) -> bool:
        """Whether this node's target shows live connections (nvmet needs its debugfs)."""
        return bool((getattr(self.node, "describe", None) or {}).get("connections_visible", True))

    def stop(self) -> None:
        """The daemon stops: copies stop at their next chunk."""
        for c in self.copies.values():
            c.cancel.set()

    def reset(self) -> None:
        """The data plane came back empty: apply every export again."""
        for c in self.copies.values():
            c.exported = None

    def report(self) -> dict[str, Any]:
        out = {}
        for uuid, c in self.copies.items():
            out[uuid] = {
                "state": "failed" if c.error and c.state not in ("copying", "verifying") else c.state,
                "progress": None if c.progress is None else round(c.progress, 3),
                "resumed": None if c.resumed is None else round(c.resumed, 3),
                "sha256": c.sha256,
                "error": c.error,
                "hosts": c.hosts,
                # null: this target cannot show connections (the map then counts every granted
                # host as possibly connected); only said of an export that serves hosts
                "connected": None if c.hosts is not None and not self._visible() else sorted(c.connected),
            }
        return out

    # --- one volume ----------------------------------------------------------------------------

    async def _one(self, st: dict[str, Any], me: int, pub: dict[str, Any]) -> bool:
        dp = self.node.dp
        if dp.name != "kernel":
            raise NotSupported(f"published volumes need the kernel data plane; this node runs {dp.name}")
        uuid = pub["uuid"]
        c = self.copies.setdefault(uuid, Copy(uuid))
        slot = next(s for s in pub["placement"] if s["node"] == me)
        ops = self.node.ops
        size = int(pub["size_bytes"])
        if c.device is None:
            if slot["seed"]:
                snap = st["snapshots"].get(pub["snapshot"])
                if snap is None:
                    raise NotSupported(f"snapshot {pub['snapshot_name']} is gone from this node")
                info = await ops.call("clone_snapshot", slot["pool_id"], snap["snap_id"], lv_name(uuid))
                offset = dp.mirror_caps.data_offset_bytes if pub["mirrored"] else 0
            else:
                info = await ops.call("create_volume", slot["pool_id"], lv_name(uuid), size)
                offset = 0
            c.device = await ops.call("ensure_view", view_id(uuid), info.device, offset, size, True)
            c.error = None
        if c.task is None and c.state in ("waiting", "failed"):
            if slot["seed"]:
                c.task = asyncio.create_task(self._job(c, self._hash(pub, c, None, None)))
            else:
                src = (pub.get("copy_from") or {}).get(me)
                if src is not None:
                    c.task = asyncio.create_task(self._job(c, self._copy(st, me, pub, c, src)))
        elif c.state == "ready" and pub["checksum"] and c.sha256 != pub["checksum"] and not slot["seed"]:
            LOG.warning("published volume %s: copy differs from the source; copying again", pub["name"])
            self._forget(uuid)
            c.state, c.sha256, c.resumed = "waiting", None, None
            return True
        retry = await self._exports(st, me, pub, c)
        if c.state != "failed":
            c.error = None
        return retry

    async def _exports(self, st: dict[str, Any], me: int, pub: dict[str, Any], c: Copy) -> bool:
        uuid = pub["uuid"]
        joined = me in (st["paths"].get(uuid) or {})
        lst = tuple(self.node.ops.listeners())
        slot_i = [s["node"] for s in pub["placement"]].index(me)
        feeds = sorted(t for t, s in (pub.get("copy_from") or {}).items() if s == me)
        cid = str(st["cluster_id"])
        opened = self.node.open_hosts(st["hosts"])
        hosts = model.host_access(pub["hosts"], opened)
        lst = model.tls_listeners(lst, tlskey.volume_policy(pub["hosts"], opened))
        want = (joined, hosts, tuple(feeds), lst)  # in memory only: a changed key re-exports
        ops = self.node.ops
        if want != c.exported and c.device is not None:
            if joined:
                spec = ExportSpec(
                    nqn=pub["nqn"],
                    serial=pub["serial"],
                    pool_id=pub["placement"][slot_i]["pool_id"],
                    vol_id=lv_name(uuid),
                    uuid=uuid,
                    nguid=pub["nguid"],
                    listeners=lst,
                    hosts=hosts,
                    ana_group=names.ANA_GROUP_OPTIMIZED,
                    ana_state="optimized",
                    cntlid_min=slot_i * CNTLID_SPAN + 1,
                    cntlid_max=(slot_i + 1) * CNTLID_SPAN,
                    device=c.device,
                )
                await ops.call("apply_export", spec)
            else:
                await ops.call("remove_export", pub["nqn"])
            rnqn = names.replica_nqn(uuid, str(me))
            if joined and feeds:
                ruuid, rnguid = names.replica_ids(uuid, str(me))
                spec = ExportSpec(
                    nqn=rnqn,
                    serial=rnguid[:20],
                    pool_id=pub["placement"][slot_i]["pool_id"],
                    vol_id=lv_name(uuid),
                    uuid=ruuid,
                    nguid=rnguid,
                    listeners=tuple(li for li in lst if li.trtype == "tcp"),
                    hosts=tuple(HostAccess(node_host_nqn(cid, t)) for t in feeds),
                    device=c.device,
                )
                await ops.call("apply_export", spec)
            else:
                await ops.call("remove_export", rnqn)
            c.exported = want
            c.hosts = sorted(h.host_nqn for h in hosts) if joined else None
        if joined:
            info = await ops.call("export_info", pub["nqn"])
            c.connected = sorted(set(info.connected_hosts)) if info is not None else []
        return False

    # --- copies (worker threads) ------------------------------------------------------------------

    def _limit(self, st: dict[str, Any], me: int) -> int | None:
        mbps = (st["nodes"].get(me) or {}).get("rebuild_mbps")
        return None if mbps is None else int(mbps) * 1_000_000

    def _progress(self, c: Copy) -> Any:
        last = [0.0]

        def cb(frac: float) -> None:
            c.progress = frac
            if frac - last[0] >= 0.05 or frac >= 1.0:
                last[0] = frac
                self._loop.call_soon_threadsafe(self.agent.wake.set)

        return cb

    async def _hash(self, pub: dict[str, Any], c: Copy, src_dev: str | None, limit: int | None) -> None:
        """Read (src_dev None: the local view) or copy into the local LV, and hash."""
        c.state, c.progress, c.error = ("verifying" if src_dev is None else "copying"), 0.0, None
        self._loop = asyncio.get_running_loop()
        size = int(pub["size_bytes"])
        try:
            if src_dev is None:
                sha = await asyncio.to_thread(
                    pubcopy.copy_and_hash,
                    str(c.device),
                    size,
                    None,
                    progress=self._progress(c),
                    cancel=c.cancel,
                )
            else:
                dst = await self._lv_device(pub)
                resume = self._recorded(pub["uuid"], size)
                c.resumed = None
                if resume:
                    c.resumed = min(1.0, len(resume) * pubcopy.SEGMENT / size)
                    LOG.info(
                        "published volume %s: resuming the copy after %d recorded segment(s)",
                        pub["name"],
                        len(resume),
                    )
                sha = await asyncio.to_thread(
                    pubcopy.copy_and_hash,
                    src_dev,
                    size,
                    dst,
                    limit_bps=limit,
                    progress=self._progress(c),
                    cancel=c.cancel,
                    resume=resume,
                    checkpoint=self._checkpoint(pub["uuid"], size),
                )
            c.sha256, c.state, c.progress = sha, "ready", 1.0
            LOG.info(
                "published volume %s: %s, sha256 %s",
                pub["name"],
                "read" if src_dev is None else "copied",
                sha,
            )
        except Exception as exc:  # a worker thread's failure is reported, retried at the next pass
            c.state, c.error = "failed", f"{type(exc).__name__}: {exc}"
            LOG.error("published volume %s: %s", pub["name"], c.error)

    # --- the copy's durable progress (node store) ---------------------------------------------------

    def _recorded(self, uuid: str, size: int) -> list[str]:
        """The segment digests an earlier run of this copy made durable (none if it was made
        for another size or segment length)."""
        try:
            with self.node.store.read() as txn:
                rec = txn.get(PROGRESS_DB, progress_key(uuid))
        except Exception as exc:  # a record that cannot be read is a copy from zero, not a failure
            LOG.warning("published volume %s: copy progress unreadable (%s); copying from zero", uuid, exc)
            return []
        if not isinstance(rec, dict) or rec.get("size") != size or rec.get("segment") != pubcopy.SEGMENT:
            return []
        return [str(d) for d in rec.get("digests") or []]

    def _checkpoint(self, uuid: str, size: int) -> Any:
        store = self.node.store

        def save(digests: list[str]) -> None:  # in the copy's worker thread, after the fsync
            try:
                with store.write() as txn:
                    txn.put(
                        PROGRESS_DB,
                        progress_key(uuid),
                        {"size": size, "segment": pubcopy.SEGMENT, "digests": digests},
                    )
            except Exception as exc:  # the copy goes on; a restart would copy more again
                err = storage_error(exc)
                LOG.warning("published volume %s: copy progress not recorded: %s", uuid, err or exc)

        return save

    def _forget(self, uuid: str) -> None:
        try:
            with self.node.store.write() as txn:
                txn.delete(PROGRESS_DB, progress_key(uuid))
        except Exception as exc:
            LOG.warning("published volume %s: copy progress not dropped: %s", uuid, exc)

    async def _job(self, c: Copy, work: Any) -> None:
        try:
            await work
        finally:
            c.task = None
            self.agent.wake.set()

    async def _lv_device(self, pub: dict[str, Any]) -> str:
        for v in await self.node.ops.call("list_volumes", None):
            if v.vol_id == lv_name(pub["uuid"]) and v.device:
                return str(v.device)
        raise NotSupported(f"the LV of published volume {pub['name']} is not there")

    async def _copy(self, st: dict[str, Any], me: int, pub: dict[str, Any], c: Copy, src: int) -> None:
        uuid, cid = pub["uuid"], str(st["cluster_id"])
        lst = ((st["reports"].get(src) or {}).get("dataplane") or {}).get("listeners") or []
        tcp = next((li for li in lst if li.get("trtype") == "tcp"), None)
        if tcp is None:
            c.state, c.error = "failed", f"node {src} has no TCP listener to copy from"
            return
        _, rnguid = names.replica_ids(uuid, str(src))
        host = node_host_nqn(cid, me)
        spec = RemoteSpec(
            nqn=names.replica_nqn(uuid, str(src)),
            listener=Listener("tcp", tcp["traddr"], tcp["trsvcid"], tcp.get("adrfam", "ipv4")),
            host_nqn=host,
            host_id=node_host_id(host),
            nguid=rnguid,
            ctrl_loss_tmo=30,  # a copy fails and is retried, it never blocks for ever
            fast_io_fail_tmo=5,
        )
        c.source = src
        try:
            dev = await self.node.ops.call("attach_remote", spec)
            await self._hash(pub, c, dev, self._limit(st, me))
        except NodeosError as err:
            c.state, c.error = "failed", err.message
        finally:
            try:
                await self.node.ops.call("detach_remote", spec.nqn)
            except NodeosError as err:
                LOG.warning("detach of %s failed: %s", spec.nqn, err.message)
            c.source = None

    # --- what the map no longer wants --------------------------------------------------------------

    async def _gc(self, st: dict[str, Any], me: int, wanted: set[str]) -> bool:
        ops = self.node.ops
        for uuid in sorted(set(self.copies) - wanted):
            c = self.copies[uuid]
            c.cancel.set()
            if c.task is not None:
                return True  # the worker stops at its next chunk
        if self._scanned and not set(self.copies) - wanted:
            return False  # LVs are looked for at start (a restart forgot them) and when one goes
        try:
            lvs = [v for v in await ops.call("list_volumes", None) if v.vol_id.startswith(LV_PREFIX)]
        except NodeosError as err:
            LOG.warning("published volumes: cannot list LVs: %s", err.message)
            return True
        have = {v.vol_id: v for v in lvs}
        found = {u for u in (_uuid_of(v) for v in have.values()) if u is not None}
        for uuid in sorted(set(self.copies) | found):
            if uuid in wanted:
                continue
            try:
                await ops.call("remove_export", f"nqn.2014-08.io.nodeos:vol:{uuid}")
                await ops.call("remove_export", names.replica_nqn(uuid, str(me)))
                await ops.call("remove_view", view_id(uuid))
                lv = have.get(lv_name(uuid))
                if lv is not None:
                    await ops.call("delete_volume", lv.pool_id, lv.vol_id)
                self._forget(uuid)
            except NodeosError as err:
                LOG.warning("published volume %s not torn down yet: %s", uuid, err.message)
                return True
            self.copies.pop(uuid, None)
            LOG.info("published volume %s removed from this node", uuid)
        self._scanned = True
        return False


def _uuid_of(v: Any) -> str | None:
    h = v.vol_id[len(LV_PREFIX) :]
    if len(h) != 32:
        return None
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
