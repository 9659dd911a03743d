"""The imperative shell around the pure Raft core: time, disk, network and the cluster map.

One asyncio task handles every Ready in the order Raft requires:
  1. send what promises nothing about this node's disk (a leader's appends and heartbeats,
     rawnode.split_messages): followers write the entries while the leader does;
  2. persist snapshot + entries + hard state in ONE synced write (the log file), on the disk
     thread so the event loop keeps taking messages and proposals meanwhile (those form the
     next Ready: group commit). Skipped when the Ready changes only the commit index
     (Ready.must_sync); that hard state rides along with the next write;
  3. only then send the rest (acks and votes promise what was just persisted),
  4. restore a received snapshot, apply committed entries to the map, answer waiters,
  5. advance (the leader's own entries count toward commit only from here).
Ticks come from a timer; messages from the transport; proposals and reads from the service.

Proposals are wrapped as `[request id, command, time]` (nodeos/cluster/entry.py) so the
proposer can find the result of its own entry; the map sees the command and the proposer's
time (its events carry it: the map reads no clock). Events a command records go to the
journal on the node that applies it as leader, so each appears there once
(nodeos/observe/journal.py). Proposals made in one turn of the event loop reach Raft as one
(one append per follower). A proposal is acknowledged only once its entry is committed AND
applied. When this node loses leadership, every pending proposal fails with OutcomeUnknown
(its entry may still commit under the next leader); one not yet handed to Raft, NotLeader.

Linearizable reads use ReadIndex: the leader confirms it is still leader with a quorum, then
serves the read once the map has applied up to the read index.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import lmdb

from nodeos.cluster import entry
from nodeos.cluster.errors import NotLeader, OutcomeUnknown, remote_error
from nodeos.cluster.leader_contact import LEADER_MESSAGES, LeaderContact
from nodeos.cluster.raft import (
    NONE,
    ConfChange,
    ConfChangeType,
    Config,
    ConfState,
    Entry,
    EntryType,
    ProposalDropped,
    RawNode,
    Ready,
    StateRole,
    decode_conf_change,
    from_wire,
    split_messages,
    to_wire,
)
from nodeos.cluster.raft.types import HardState
from nodeos.cluster.raft_logfile import LogFileRaftStorage
from nodeos.cluster.raft_status import peer_addresses, status_report
from nodeos.cluster.raft_storage import CorruptRecord, LmdbRaftStorage
from nodeos.cluster.ready_crash import CRASH_FILE_ENV, crash_point
from nodeos.cluster.statemachine import ReplicatedMap
from nodeos.cluster.transport import PeerTransport
from nodeos.cluster.voter_keeper import VoterKeeper, record_change
from nodeos.cluster.waiters import ReadRounds, Waiters, settled
from nodeos.daemon.stopguard import cancel_and_wait
from nodeos.observe.journal import log_event
from nodeos.observe.latency import LatencyHistogram
from nodeos.store.lmdb_store import storage_error

log = logging.getLogger("nodeosd.cluster")

SNAPSHOT_EVERY = 2000  # applied entries between map snapshots
KEEP_AFTER_SNAPSHOT = 500  # entries kept behind a snapshot so slow followers catch up from the log


M = TypeVar("M", bound=ReplicatedMap)


class RaftDriver(Generic[M]):
    """Raft for one member, replicating `state_machine` (nodeos/cluster/statemachine.py): the
    driver applies committed entries to it, snapshots and restores it, and reads the members,
    the voter policy and the recorded events through that interface only."""

    def __init__(
        self,
        raft_id: int,
        storage: LogFileRaftStorage | LmdbRaftStorage,
        transport: PeerTransport,
        *,
        state_machine: M,
        tick_s: float = 0.1,
        election_tick: int = 10,
        heartbeat_tick: int = 1,
        on_removed: Callable[[], None] | None = None,
        extra_peers: dict[int, str] | None = None,
    ) -> None:
        self.id = raft_id
        self.storage = storage
        self.transport = transport
        self.tick_s = tick_s
        self.map: M = state_machine
        self.on_removed = on_removed
        self.extra_peers = dict(extra_peers or {})
        snap = storage.snapshot()
        applied = 0
        if not snap.is_empty():
            self.map.restore(snap.data, snap.index)
            applied = snap.index
        self.conf_state: ConfState = storage.initial_state()[1]
        self.last_snapshot = applied
        cfg = Config(
            id=raft_id,
            election_tick=election_tick,
            heartbeat_tick=heartbeat_tick,
            applied=applied,
            check_quorum=True,
            pre_vote=True,
        )
        self.node = RawNode(cfg, storage)
        self.leader = NONE
        self.role = StateRole.FOLLOWER
        self.term = 0
        self.leader_changed = asyncio.Event()
        # Set (and replaced) once applied entries changed the map beyond its key-value store:
        # what the node's agent and the API's waits react to, instead of polling.
        self.map_changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._waiters = Waiters()
        self._reads = ReadRounds(self._waiters, self._issue_read)
        self._rid_prefix, self._rid_seq = os.urandom(6), 0
        self._batch: list[tuple[bytes, bytes]] = []  # (request id, framed entry) not yet proposed
        self._conf_inflight_until = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self.bad_messages = 0
        # Read by the metrics exporter: the synced Raft write, and propose -> applied (leader).
        self.fsync_latency = LatencyHistogram()
        self.commit_latency = LatencyHistogram()
        self._snapshot_due = False
        self.removed = False
        # One thread does every Raft disk write, in Ready order, off the event loop.
        self._disk = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"raft-disk-{raft_id}")
        self._lazy_hard_state: HardState | None = None  # a commit-index-only change not yet written
        self._crash_file = os.environ.get(CRASH_FILE_ENV)
        self._disk_failed: Exception | None = None  # a read of the Raft log failed while stepping
        self._writing = False  # a Ready's write is on the disk thread: appends may go out meanwhile
        self.failure: str | None = None  # why the Ready loop stopped, for status and the supervisor
        self.voter_keeper = VoterKeeper()  # the leader keeps the voter set (nodeos/cluster/voters.py)
        self.contact = LeaderContact(started=time.monotonic())  # a new leader's lease floor asks it
        self._sync_peers()

    # --- lifecycle ---
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._ticker()), loop.create_task(self._loop())]
        # Apply what is already committed at once: until then Raft only knows the snapshot's
        # membership, so the node must not reach its election timeout first.
        self._wake.set()

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        # A write already on the disk thread finishes (LMDB commits it whole or not at all).
        await asyncio.get_running_loop().run_in_executor(None, self._disk.shutdown)
        self._waiters.fail_all(NotLeader("the cluster service is stopping"))

    @property
    def running(self) -> bool:
        """False once the Ready loop died (e.g. the disk failed): this node no longer takes part."""
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    def campaign(self) -> None:
        self.node.campaign()
        self._wake.set()

    # --- inputs ---
    def on_raft(self, frm: int, wire: dict[str, Any]) -> None:
        if self._tasks and not self.running:
            return
        if self._disk_failed is not None:
            return
        try:
            msg = from_wire(wire)
            if msg.frm != frm:
                raise ValueError(f"message claims to be from {msg.frm} on node {frm}'s connection")
            if msg.type in LEADER_MESSAGES:  # noted before Raft takes (or refuses) it: later is safe
                self.contact.note(msg.term, time.monotonic())
            self.node.step(msg)
        except (lmdb.Error, CorruptRecord) as exc:
            # Our disk, not the peer's message: stop taking part, as a failed write does.
            self._disk_failed = exc
            self._wake.set()
            return
        except Exception as exc:  # a peer's bad message must never stop this node
            self.bad_messages += 1
            log.warning("dropped a bad raft message from node %d: %s", frm, exc)
            return
        self._pump()
        self._wake.set()

    async def propose(self, command: bytes, timeout: float = 5.0) -> Any:
        """Propose a map command; returns the map's result once committed and applied here."""
        if self.role is not StateRole.LEADER:
            raise NotLeader(f"node {self.id} is not the leader (leader: {self.leader or 'unknown'})")
        rid = self._next_rid()
        fut = self._waiters.add_proposal(rid)
        # Proposals made in the same turn of the event loop (e.g. requests from several clients
        # read in one poll) go to Raft together: one append per follower, one ack back.
        self._batch.append((rid, entry.frame(rid, command, time.time())))
        if len(self._batch) == 1:
            asyncio.get_running_loop().call_soon(self._propose_batch)
        t0 = time.perf_counter()

        def late() -> Exception:
            return OutcomeUnknown(f"not committed within {timeout} s; it may or may not be applied")

        out = await settled(fut, timeout, self._waiters.proposals, rid, late)
        self.commit_latency.observe(time.perf_counter() - t0)
        if "error" in out:
            raise remote_error(out["error"])
        return out.get("result")

    def _next_rid(self) -> bytes:
        """A proposal's id, unique to this incarnation of this node: a random prefix drawn at
        start and a counter (no system call per proposal, unlike os.urandom)."""
        self._rid_seq += 1
        return self._rid_prefix + self._rid_seq.to_bytes(6, "big")

    def _propose_batch(self) -> None:
        if not self._batch:
            return  # refused meanwhile (_refuse_batch)
        try:
            if not self.running:  # stopped (or failed) since these were queued
                raise ProposalDropped("the cluster service is stopping on this node")
            self.node.propose_many([data for _, data in self._batch])
        except ProposalDropped as exc:
            self._refuse_batch(f"proposal not accepted: {exc}")
            return
        self._batch = []
        self._pump()
        self._wake.set()

    def _refuse_batch(self, why: str) -> None:
        """The proposals not yet handed to Raft fail with NotLeader: they were never proposed."""
        batch, self._batch = self._batch, []
        for rid, _ in batch:
            fut = self._waiters.proposals.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_exception(NotLeader(why))

    async def propose_conf_change(
        self, cc_type: ConfChangeType, node_id: int, timeout: float = 10.0
    ) -> ConfState:
        if self.role is not StateRole.LEADER:
            raise NotLeader(f"node {self.id} is not the leader")
        if time.monotonic() < self._conf_inflight_until:
            raise NotLeader("another membership change is in progress; try again")
        rid = os.urandom(12)
        fut = self._waiters.add_proposal(rid)
        try:
            self.node.propose_conf_change(ConfChange(cc_type, node_id, rid))
        except ProposalDropped as exc:
            self._waiters.proposals.pop(rid, None)
            raise NotLeader(f"membership change not accepted: {exc}") from None
        self._conf_inflight_until = time.monotonic() + timeout
        self._wake.set()

        def late() -> Exception:
            return OutcomeUnknown(f"membership change not committed within {timeout} s")

        return await settled(fut, timeout, self._waiters.proposals, rid, late)

    async def read_barrier(self, timeout: float = 5.0) -> None:
        """Return once the local map reflects every write committed before this call (ReadIndex;
        readers arriving while a round runs share the next: waiters.ReadRounds)."""
        if self.role is not StateRole.LEADER:
            raise NotLeader(f"node {self.id} is not the leader")
        await self._reads.barrier(timeout)

    def _issue_read(self, ctx: bytes) -> None:
        self.node.read_index(ctx)
        self._wake.set()

    def contact_ago(self, term: int) -> float | None:
        """Seconds since this member may last have acknowledged a leader of a term below `term`
        (nodeos/cluster/leader_contact.py); None while its own term is below `term` (it could
        still acknowledge one)."""
        if self.term < term:
            return None
        return time.monotonic() - self.contact.last_before(term)

    def transfer_leadership(self, to: int) -> None:
        self.node.transfer_leadership(to)
        self._wake.set()

    # --- the loop ---
    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            self.node.tick()
            if self.role is StateRole.LEADER:
                self._keep_voters()
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                if self._disk_failed is not None:
                    raise self._disk_failed
                while self.node.has_ready():
                    await self._handle_ready()
            except Exception as exc:
                # Persisting failed (disk?) or a bug: continuing could break Raft's promises.
                err = storage_error(exc)
                self.failure = f"{err.code}: {err.message}" if err else f"{type(exc).__name__}: {exc}"
                self.role, self.leader = StateRole.FOLLOWER, NONE  # never route as leader again
                log.critical("raft loop failed; stopping this node's cluster participation", exc_info=True)
                self._refuse_batch("the cluster service failed on this node")
                self._waiters.fail_all(OutcomeUnknown("the cluster service failed on this node"))
                self._tasks[0].cancel()  # no more ticks: this node stays silent rather than half-alive
                raise

    async def _handle_ready(self) -> None:
        rd = self.node.ready()
        crash = self._crash_file is not None and bool(rd.entries)
        if crash:
            self._crash_point("taken")
        now, after_sync = split_messages(rd)
        for m in now:
            self.transport.send_raft(m.to, to_wire(m))
        if crash:
            self._crash_point("early-sent")
        if rd.must_sync:
            hs = rd.hard_state if rd.hard_state is not None else self._lazy_hard_state
            self._lazy_hard_state = None
            loop = asyncio.get_running_loop()
            self._writing = True
            t0 = time.perf_counter()
            try:
                view = await loop.run_in_executor(self._disk, self.storage.write, hs, rd.entries, rd.snapshot)
            finally:
                self._writing = False
            self.fsync_latency.observe(time.perf_counter() - t0)
            self.storage.install(view)
        elif rd.hard_state is not None:
            # Only the commit index moved: losing it in a crash costs nothing (the leader
            # tells it again), so it is not worth a device flush of its own.
            self._lazy_hard_state = rd.hard_state
        if crash:
            self._crash_point("written")
        if rd.hard_state is not None:
            self.term = rd.hard_state.term
        for m in after_sync:
            self.transport.send_raft(m.to, to_wire(m))
        if crash:
            self._crash_point("sent")
        if rd.snapshot is not None and not rd.snapshot.is_empty():
            self.map.restore(rd.snapshot.data, rd.snapshot.index)
            self.conf_state = rd.snapshot.meta.conf_state
            self.last_snapshot = rd.snapshot.index
            self._sync_peers()
        changed = rd.snapshot is not None and not rd.snapshot.is_empty()
        for e in rd.committed_entries:
            changed |= self._apply(e)
        if changed:
            self.map_changed.set()
            self.map_changed = asyncio.Event()
        for rs in rd.read_states:
            self._waiters.read_confirmed(rs.request_ctx, rs.index)
        if rd.soft_state is not None:
            self._on_soft_state(rd)
        if crash:
            self._crash_point("applied")
        self.node.advance(rd)
        if self.role is StateRole.LEADER:  # a leader acknowledges its own barriers
            self.contact.note(self.term, time.monotonic())
        self._waiters.serve_reads(self.map.applied_index)
        self._maybe_snapshot()

    def _pump(self) -> None:
        """While a write runs, send the leader's new appends at once instead of after it."""
        if self._writing:
            for m in self.node.take_messages_before_sync():
                self.transport.send_raft(m.to, to_wire(m))

    def _crash_point(self, step: str) -> None:
        assert self._crash_file is not None
        crash_point(self._crash_file, step)

    def _apply(self, e: Entry) -> bool:
        """Apply one committed entry; True if it changed more than the key-value store."""
        if e.index <= self.map.applied_index:
            return False
        if e.type == EntryType.CONF_CHANGE:
            cc = decode_conf_change(e.data)
            self.conf_state = self.node.apply_conf_change(cc)
            self.map.apply(e.index, b"")
            self._conf_inflight_until = 0.0
            self._waiters.applied(cc.context, self.conf_state)
            self._sync_peers()
            if cc.type != ConfChangeType.REMOVE:
                # A new member catches up from a snapshot; the only one may be older than its
                # admission, and Raft ignores a snapshot whose membership lacks the receiver.
                self._snapshot_due = True
            log.info("membership now voters=%s learners=%s", self.conf_state.voters, self.conf_state.learners)
            if cc.type == ConfChangeType.REMOVE and cc.node_id == self.id:
                self.removed = True
                if self.on_removed is not None:
                    self.on_removed()
            return True
        if not e.data:
            self.map.apply(e.index, b"")  # a new leader's no-op entry
            return False
        rid, cmd, at = entry.unframe(e.data)
        first_event = self.map.event_seq()
        result = self.map.apply(e.index, cmd, at)
        if self.role is StateRole.LEADER:
            for rec in self.map.new_events(first_event):
                log_event(rec)
        self._waiters.applied(rid, result)
        name = entry.command_name(cmd)
        if name in ("add_node", "remove_node"):
            self._sync_peers()
        return not (isinstance(name, str) and name.startswith("kv_"))

    def _on_soft_state(self, rd: Ready) -> None:
        ss = rd.soft_state
        assert ss is not None
        was_leader = self.role is StateRole.LEADER
        if ss.leader != self.leader:
            log.info("leader is now %s (term %d)", ss.leader or "unknown", self.node.status().hard_state.term)
        self.leader, self.role = ss.leader, ss.role
        self.leader_changed.set()
        self.leader_changed = asyncio.Event()
        if self.role is StateRole.LEADER and not was_leader:
            self.voter_keeper.became_leader(time.monotonic())
        if was_leader and self.role is not StateRole.LEADER:
            self._refuse_batch(f"node {self.id} is no longer the leader")
            self._waiters.fail_all(
                OutcomeUnknown("leadership changed; the command may or may not be applied")
            )

    def _maybe_snapshot(self) -> None:
        applied = self.map.applied_index
        if applied <= self.last_snapshot or (
            applied - self.last_snapshot < SNAPSHOT_EVERY and not self._snapshot_due
        ):
            return
        self._snapshot_due = False
        self.storage.create_snapshot(applied, self.conf_state, self.map.snapshot())
        self.last_snapshot = applied
        compact_to = applied - KEEP_AFTER_SNAPSHOT
        if compact_to >= self.storage.first_index():
            self.storage.compact(compact_to)

    def _keep_voters(self) -> None:
        """The one membership change (or leadership transfer) voters.plan asks for, if any."""
        now = time.monotonic()
        st = self.node.status()
        policy = self.map.voter_policy()
        ch = self.voter_keeper.tick(st, self.conf_state, self.map.nodes, policy, now).change
        if ch is None or now < self._conf_inflight_until:
            return
        if ch.kind == "transfer":
            if st.lead_transferee == NONE:
                log.info("transferring leadership to %d: %s", ch.node_id, ch.reason)
                self.voter_keeper.started(ch)
                self.node.transfer_leadership(ch.node_id)
            return
        cc = ConfChangeType.ADD_VOTER if ch.kind == "promote" else ConfChangeType.ADD_LEARNER
        try:
            self.node.propose_conf_change(ConfChange(cc, ch.node_id, b""))
        except ProposalDropped:
            return
        log.info("%s node %d: %s", "promoting" if ch.kind == "promote" else "demoting", ch.node_id, ch.reason)
        self._conf_inflight_until = now + 10.0
        self.voter_keeper.started(ch)
        self.voter_keeper.keep(asyncio.get_running_loop().create_task(record_change(self.propose, ch)))

    def _sync_peers(self) -> None:
        """Point the transport at every member: addresses from the map (or the join reply)."""
        want = peer_addresses(self.map.nodes, self.extra_peers)
        members = set(self.conf_state.voters) | set(self.conf_state.learners)
        for nid, addr in want.items():
            if nid != self.id:
                self.transport.set_peer(nid, addr)
        for nid in list(self.transport.peers()):
            if nid not in want and nid not in members:
                self.transport.remove_peer(nid)

    # --- introspection ---
    def status(self) -> dict[str, Any]:
        out = status_report(
            self.id,
            self.node.status(),
            applied=self.map.applied_index,
            conf_state=self.conf_state,
            first_index=self.storage.first_index(),
            last_index=self.storage.last_index(),
            bad_messages=self.bad_messages,
        )
        if self.role is StateRole.LEADER:
            out["voter_set"] = self.voter_keeper.report(self.map.voter_policy())
        return out
