"""The deterministic cluster simulation: one seed = one reproducible run.

Everything random (fault schedule, delays, drops, election jitter, client load) derives
from the seed, and events are ordered by (virtual time, sequence number), so a seed
replays exactly. Phases: `duration_ms` of faults (partitions, crashes that lose unsynced
writes, restarts, lossy/duplicating/reordering network, membership changes, leader
transfers) with clients proposing commands and doing ReadIndex reads; then a settle
phase (network healed, every node restarted, sometimes all at once) in which a final
command must commit before a deadline; every node that applied it must then hold every
acknowledged command.
"""

from __future__ import annotations

import heapq
import os
import random
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

import msgpack

from ..map import ClusterMap, decode_command, encode_command
from ..raft import (
    Message,
    MessageType,
    ProposalDropped,
    StateRole,
    bootstrap_storage,
    from_wire,
    split_messages,
    to_wire,
)
from ..raft.storage import MemoryStorage
from ..raft_logfile import LogFileRaftStorage
from ..raft_storage import LmdbRaftStorage
from .config import SeedResult, SimConfig, msg_summary
from .disruption import Disruption, DisruptionMixin
from .events import CLIENT, CRASH, DELIVER, DONE, FAULT, FINAL, HEAL, REJOIN, RESTART, SETTLE, SYNC, TICK
from .faults import FaultsMixin
from .invariants import Checker, Violation
from .mapbroken import map_bug
from .mapcheck import MapChecker, before
from .mapload import DecisionViolation, MapWorkload
from .network import NetworkFaults, SimNetwork
from .node import PendingRead, SimNode
from .ticks import TicksMixin


class Simulation(FaultsMixin, DisruptionMixin, TicksMixin):
    def __init__(self, seed: int, cfg: SimConfig) -> None:
        self.seed = seed
        self.cfg = cfg
        self.rng = random.Random(seed)
        r = self.rng
        faults = NetworkFaults(
            drop=r.choice([0.0, 0.01, 0.05, 0.15]),
            duplicate=r.choice([0.0, 0.02, 0.1]),
            min_delay=1,
            max_delay=r.choice([2, 5, 15]),
            slow=r.choice([0.0, 0.02, 0.1]),
            slow_delay=r.choice([30, 120]),
            reorder=r.random() < 0.5,
        )
        self.net = SimNetwork(random.Random(r.getrandbits(64)), faults)
        self.check = Checker()
        self.now = 0
        self._seq = 0
        self._events: list[tuple[int, int, int, Any]] = []
        self.trace: list[str] = []
        self.stats = {
            "elections": 0,
            "acked": 0,
            "reads": 0,
            "crashes": 0,
            "snapshots_sent": 0,
            "events": 0,
            "conf_changes": 0,
            "transfers": 0,
        }
        self.compact_every = r.choice([8, 20, 60])
        # Swarm testing: each seed picks its own fault density and batching.
        self.fault_gap = r.choice([(40, 250), (10, 80), (100, 400)])
        self.max_msg_size = r.choice([1, 64, 256, 4096])
        # Crashing leaders right after their election leaves entries of their term on a
        # minority: the Figure 8 situations that the commit rule (5.4.2) exists for.
        self.crash_new_leader = r.choice([0.0, 0.0, 0.3, 0.6])
        # Crashing a leader right after its commit index moved leaves followers that saw the
        # entry and others that did not: the next leader must finish the job by its own term.
        self.crash_after_commit = r.choice([0.0, 0.0, 0.1, 0.3])
        self.disruption: Disruption | None = None
        self.done = False
        self.compact_keep = r.choice([0, 2, 10])
        self.disk_max_ms = r.choice([0, 2, 10, 30])  # slow disks widen the unsynced window
        self.next_cmd = 0
        self.next_read = 0
        self.proposer: dict[bytes, tuple[int, int]] = {}  # command -> (node, incarnation)
        self.final_cmd: bytes | None = None
        self.final_index = 0
        self.mapload: MapWorkload | None = None
        self.mapcheck = MapChecker()
        if cfg.workload == "map":  # drawn only then: an opaque seed replays as before
            self.mapload = MapWorkload(random.Random(r.getrandbits(64)))
        ids = list(range(1, cfg.nodes + 1))
        self.nodes: dict[int, SimNode] = {}
        self.next_tick: dict[int, int] = {}
        self.wake_at: dict[int, int | None] = {}
        self.disk_dir: Path | None = None
        if cfg.storage in ("lmdb", "logfile"):
            shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # fsync is free on tmpfs
            self.disk_dir = Path(tempfile.mkdtemp(prefix=f"nodeos-sim-{seed}-", dir=shm))
        for nid in ids:
            disk: MemoryStorage = MemoryStorage()
            reopen = None
            if self.disk_dir is not None:
                path = self.disk_dir / f"n{nid}"

                def reopen(path: Path = path) -> MemoryStorage:
                    if cfg.storage == "logfile":
                        return LogFileRaftStorage.open(path)  # type: ignore[return-value]
                    return LmdbRaftStorage.open(path)  # type: ignore[return-value]

                disk = reopen()
            self._bootstrap(disk, ids)
            self.nodes[nid] = SimNode(
                nid, disk, cfg.election_tick, cfg.heartbeat_tick, seed, self.max_msg_size, reopen=reopen
            )
            if self.mapload is not None or cfg.workload == "failover":
                self.nodes[nid].cmap = ClusterMap()
        for nid in ids:
            self._start(nid, r.randint(0, cfg.tick_ms - 1))
        self._schedule_faults()
        self._schedule_clients()
        self._at(cfg.duration_ms, SETTLE, None)
        self._at(cfg.client_ms() + 150, FINAL, None)

    # --- plumbing ---
    def _at(self, t: int, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, payload))

    def log(self, text: str) -> None:
        if self.cfg.trace:
            self.trace.append(f"{self.now:6d}ms {text}")

    def _bootstrap(self, disk: MemoryStorage, ids: list[int]) -> None:
        bootstrap_storage(disk, ids)

    def _finished(self) -> bool:
        """Whether the run may end once the final command is in (a workload may want more)."""
        return True

    def _map_applied(self, n: SimNode) -> None:
        """Called after node `n` applied an entry to its map (a workload's checks)."""

    def leader(self) -> SimNode | None:
        best: tuple[int, SimNode] | None = None
        for n in self.nodes.values():
            r = n.rn.raft if n.up and n.rn is not None else None
            if r is not None and r.state is StateRole.LEADER and (best is None or r.term > best[0]):
                best = (r.term, n)
        return best[1] if best else None

    def _start(self, nid: int, first_tick: int) -> None:
        n = self.nodes[nid]
        n.start(self.cfg.broken)
        if n.cmap is not None and n.applied:
            self.mapcheck.same_state(nid, n.applied, n.cmap.state, "restarting from its snapshot at")
        self._clock_start(n, first_tick)
        self.log(f"n{nid} starts (term {n.last_term}, commit {n.last_commit}, applied {n.applied})")
        self._after_input(n)

    # --- the run ---
    def run(self) -> SeedResult:
        end = self.cfg.duration_ms + self.cfg.settle_ms
        budget = self.cfg.event_budget()
        try:
            with map_bug(self.cfg.broken):
                self._loop(end, budget)
            self._final_check()
        except DecisionViolation as exc:
            v = Violation("placement", str(exc))
            return SeedResult(self.seed, False, str(v), self.now, self.trace, self.stats)
        except Violation as v:
            return SeedResult(self.seed, False, str(v), self.now, self.trace, self.stats)
        except AssertionError as exc:
            # Raft's own consistency assertions (e.g. commit past the log) count as violations.
            v = Violation("internal assertion", f"{exc} ({traceback.extract_tb(exc.__traceback__)[-1].name})")
            return SeedResult(self.seed, False, str(v), self.now, self.trace, self.stats)
        except Exception as exc:
            # Any other exception out of Raft is a bug too: report it with its seed.
            where = traceback.extract_tb(exc.__traceback__)[-1]
            v = Violation("unexpected exception", f"{exc!r} at {where.filename}:{where.lineno}")
            return SeedResult(self.seed, False, str(v), self.now, self.trace, self.stats)
        finally:
            self._close_disks()
            if self.mapload is not None:
                self.stats.update(self.mapload.stats)
                self.stats.update(self.mapcheck.stats)
        return SeedResult(self.seed, True, None, self.now, self.trace, self.stats)

    def _loop(self, end: int, budget: int) -> None:
        events, stats, pop = self._events, self.stats, heapq.heappop
        dispatch = self._dispatch
        while events and not self.done:
            t, _, kind, payload = pop(events)
            if self.disruption is None:
                if t > end:
                    break  # deadline passed: the final check reports the lost liveness
                if (
                    self.final_index
                    and self._finished()
                    and not (self.cfg.disrupt and self._start_disruption())
                ):
                    break  # the final command is in and no disruption phase to run
            self.now = t
            count = stats["events"] + 1
            stats["events"] = count
            if count > budget:
                raise Violation(
                    "event budget", f"{budget} events used by {self.now} ms of virtual time (livelock?)"
                )
            dispatch(kind, payload)
            if self.disruption is not None:
                self._check_disruption()

    def _close_disks(self) -> None:
        if self.disk_dir is None:
            return
        for n in self.nodes.values():
            n.disk.close()  # type: ignore[attr-defined]
        shutil.rmtree(self.disk_dir, ignore_errors=True)

    def _dispatch(self, kind: int, payload: Any) -> None:
        if kind == TICK:
            self._on_tick(payload)
        elif kind == DELIVER:
            self._deliver(payload)
        elif kind == SYNC:
            nid, inc = payload
            n = self.nodes[nid]
            if n.up and n.incarnation == inc and n.syncing is not None:
                self._sync(n)
        elif kind == CLIENT:
            self._client(payload)
        elif kind == FAULT:
            self._fault(payload)
        elif kind == RESTART:
            n = self.nodes[payload]
            if not n.up:
                self._start(payload, self.now + self.cfg.tick_ms)
        elif kind == HEAL:
            self.net.heal()
            self.log("network healed")
        elif kind == SETTLE:
            self._settle()
        elif kind == FINAL:
            self._final_propose()
        elif kind == CRASH:
            nid, inc = payload
            if self.nodes[nid].up and self.nodes[nid].incarnation == inc:
                self._crash(self.nodes[nid])
        elif kind == REJOIN:
            self._rejoin()
        elif kind == DONE:
            self._check_disruption(final=True)
            self.done = True

    # --- node I/O ---
    def _after_input(self, n: SimNode) -> None:
        """Check invariants on the node's new state and start syncing its next Ready."""
        rn = n.rn
        assert rn is not None
        r = rn.raft
        state, committed = r.state, r.log.committed
        if state is StateRole.LEADER and self.check.leader_elected(n.id, r):
            self.stats["elections"] += 1
            self.log(f"n{n.id} is leader of term {r.term} (last index {r.log.last_index()})")
            if self.now < self.cfg.duration_ms and self.rng.random() < self.crash_new_leader:
                self._at(self.now + self.rng.randint(0, 8), CRASH, (n.id, n.incarnation))
        elif state is not n.last_role and self.cfg.trace:
            self.log(f"n{n.id} {n.last_role.value} -> {state.value} term {r.term}")
        if committed > n.last_commit:
            if state is StateRole.LEADER and n.last_role is StateRole.LEADER and n.last_term == r.term:
                self.check.leader_counted(n.id, r, committed)
                if self.now < self.cfg.duration_ms and self.rng.random() < self.crash_after_commit:
                    self._at(self.now + self.rng.randint(0, 4), CRASH, (n.id, n.incarnation))
            self.check.commit_advanced(n.id, r, n.last_commit, committed)
        n.last_role = state
        n.last_term = r.term
        n.last_commit = committed
        if n.syncing is not None and self.cfg.broken != "send_before_sync" and r.msgs:
            self._send_all(n, rn.take_messages_before_sync())  # as the driver's _pump does
        if n.syncing is None and rn.has_ready():
            rd = rn.ready()
            n.syncing = rd
            # As the daemon's driver does: a leader's appends and heartbeats leave before the
            # write, everything that promises something waits for it (rawnode.split_messages).
            now, after_sync = split_messages(rd)
            if self.cfg.broken == "send_before_sync":  # acks and votes too: must be caught
                now, after_sync = rd.messages, []
            self._send_all(n, now)
            rd.messages = after_sync
            delay = self.rng.randint(0, self.disk_max_ms) if rd.must_sync else 0
            self._at(self.now + delay, SYNC, (n.id, n.incarnation))
        self._schedule_wake(n)

    def _sync(self, n: SimNode) -> None:
        self._catch_up(n)
        rd = n.syncing
        rn = n.rn
        assert rd is not None and rn is not None
        # 1. one atomic, synced write: snapshot + entries + hard state. A commit-index-only
        # change is not written (the driver defers it to the next write; a crash loses it).
        if rd.must_sync:
            hs = rd.hard_state if rd.hard_state is not None else n.lazy_hard_state
            n.lazy_hard_state = None
            n.disk.persist(hs, rd.entries, rd.snapshot)
        elif rd.hard_state is not None:
            n.lazy_hard_state = rd.hard_state
        if rd.entries:
            prev = {e.index: e.term for e in rd.entries}
            first = rd.entries[0].index
            prev[first - 1] = n.disk.term(first - 1)
            self.check.persisted(n.id, rd.entries, prev)
        # 2. only now the messages leave
        self._send_all(n, rd.messages)
        # 3. apply
        if rd.snapshot is not None:
            n.restore_state(rd.snapshot.data, rd.snapshot.index)
            n.conf_state = rd.snapshot.meta.conf_state
            self.check.snapshot_restored(n.id, rd.snapshot, n.state)
            if n.cmap is not None:
                self.mapcheck.same_state(n.id, n.applied, n.cmap.state, "installing a snapshot at")
            self.log(f"n{n.id} restored snapshot at {rd.snapshot.index}")
        for e in rd.committed_entries:
            self.check.applied_entry(n.id, e)
            if n.cmap is not None and e.index > n.cmap.applied_index:  # as the driver skips replays
                old = before(n.cmap.state) if self.mapcheck.first_apply(e.index) else None
                cmd, result = n.apply_map(e.index, e.type, e.data)
                self.mapcheck.applied(n.id, e.index, n.cmap.state, old, cmd, result)
                self._map_applied(n)
            n.apply_entry_data(e.index, e.type, e.data)
            owner = self.proposer.get(e.data)
            if owner == (n.id, n.incarnation):
                del self.proposer[e.data]
                self.check.ack(e.data, e.index)
                if e.data == self.final_cmd:
                    self.final_index = e.index
                self.stats["acked"] += 1
                self.log(f"n{n.id} acknowledges {e.data!r} at index {e.index}")
        for rs in rd.read_states:
            pr = n.reads.get(rs.request_ctx)
            if pr is not None:
                pr.index = rs.index
        rn.advance(rd)
        n.syncing = None
        self._finish_reads(n)
        self._maybe_compact(n)
        if n.up:
            self._after_input(n)

    def _finish_reads(self, n: SimNode) -> None:
        for ctx, pr in list(n.reads.items()):
            if pr.index >= 0 and n.applied >= pr.index:
                del n.reads[ctx]
                self.check.read_done(n.id, ctx, pr.issued_acked, n.state_set)
                self.stats["reads"] += 1

    def _maybe_compact(self, n: SimNode) -> None:
        disk = n.disk
        if n.applied - disk.snapshot().index < self.compact_every:
            return
        data = n.snapshot_data()
        if n.cmap is not None:
            self.mapcheck.snapshot_round_trip(n.id, n.cmap.snapshot(), n.cmap.state)
        disk.create_snapshot(n.applied, n.conf_state, data)
        upto = n.applied - self.compact_keep
        if upto >= disk.first_index():
            disk.compact(upto)
        self.log(f"n{n.id} snapshot at {n.applied}, log compacted up to {upto}")

    def _send_all(self, n: SimNode, msgs: list[Message]) -> None:
        if not msgs:
            return
        now, arrivals_of, events, push = self.now, self.net.arrivals, self._events, heapq.heappush
        for m in msgs:
            arrivals = arrivals_of(now, m.frm, m.to)
            if m.type is MessageType.SNAP:
                if not arrivals and self.rng.random() < 0.5 and n.rn is not None:
                    n.rn.report_snapshot(m.to, False)  # the transport noticed the failure
                self.stats["snapshots_sent"] += 1
            for t in arrivals:  # self._at(t, DELIVER, m)
                self._seq += 1
                push(events, (t, self._seq, DELIVER, m))

    def _deliver(self, m: Message) -> None:
        n = self.nodes[m.to]
        if not n.up or not self.net.can_pass(m.frm, m.to):
            return
        assert n.rn is not None
        if self._seq % 4 == 0:
            m = from_wire(to_wire(m))  # exercise the wire codec on a share of the traffic
        if self.cfg.trace:
            self.log(f"deliver {msg_summary(m)}")
        self._catch_up(n)
        n.rn.step(m)
        self._after_input(n)

    # --- clients ---
    def _schedule_clients(self) -> None:
        t = 0
        r = self.rng
        gap = (2, 10) if self.mapload is not None else (3, 30)  # map objects take several steps
        while t < self.cfg.client_ms():
            t += r.randint(*gap)
            self._at(t, CLIENT, r.random())

    def _client(self, x: float) -> None:
        lead = self.leader()
        up = [n for n in self.nodes.values() if n.up]
        if not up:
            return
        target = lead if lead is not None and self.rng.random() < 0.8 else self.rng.choice(up)
        assert target.rn is not None
        self._catch_up(target)
        try:
            if x < 0.7:
                cmd = self._next_command(target, up)
                if cmd is not None:
                    self.proposer[cmd] = (target.id, target.incarnation)
                    target.rn.propose(cmd)
            else:
                ctx = b"r%d" % self.next_read
                self.next_read += 1
                target.reads[ctx] = PendingRead(ctx, len(self.check.acked))
                target.rn.read_index(ctx)
        except ProposalDropped:
            pass
        self._after_input(target)

    def _next_command(self, target: SimNode, up: list[SimNode]) -> bytes | None:
        cmd = b"c%d" % self.next_cmd
        self.next_cmd += 1
        if self.mapload is None:
            self.log(f"client proposes {cmd!r} at n{target.id}")
            return cmd
        assert target.cmap is not None
        # Decided from the deciding node's map (the leader's after its read barrier, or a
        # stale one's); the reporting agent reads some node's own map.
        view = self.rng.choice(up).cmap
        mc = self.mapload.next_command(target.cmap.state, view.state if view else None)
        if mc is None:
            return None
        if self.cfg.trace:
            self.log(f"client proposes {cmd!r} at n{target.id}: {str(decode_command(mc))[:300]}")
        return msgpack.packb([cmd, mc], use_bin_type=True)  # [request id, command], as the driver

    # --- settle and final checks ---
    def _settle(self) -> None:
        self.net.heal()
        f = self.net.faults
        f.drop = f.duplicate = f.slow = 0.0
        f.reorder = False
        self.log("settle: faults off, network healed, every node restarted")
        if self.rng.random() < 0.5:
            # Whole-cluster power loss: everything acknowledged must be on a quorum's disks.
            for n in self.nodes.values():
                if n.up:
                    n.crash()
            self.log("every node crashes at once")
        for nid, n in self.nodes.items():
            if not n.up:
                self._start(nid, self.now + self.cfg.tick_ms)

    def _final_propose(self) -> None:
        if self.final_cmd is not None and self.final_cmd in self.check.acked_index:
            return
        lead = self.leader()
        if lead is not None and lead.rn is not None:
            if self.final_cmd is None:
                self.final_cmd = b"final"
                if self.mapload is not None:
                    kv = encode_command("kv_put", {"key": "final", "value": 1})
                    self.final_cmd = msgpack.packb([b"final", kv], use_bin_type=True)
            self.proposer[self.final_cmd] = (lead.id, lead.incarnation)
            self._catch_up(lead)
            try:
                lead.rn.propose(self.final_cmd)
                self.log(f"final command proposed at n{lead.id}")
                self._after_input(lead)
            except ProposalDropped:
                pass
        if self.final_cmd is None or self.final_cmd not in self.check.acked_index:
            self._at(self.now + 250, FINAL, None)  # a client's retry

    def _final_check(self) -> None:
        if self.final_cmd is None or self.final_cmd not in self.check.acked_index:
            raise Violation(
                "liveness",
                f"no command committed within {self.cfg.settle_ms} ms after the faults stopped",
            )
        # Every node that applied the final command must hold every acknowledged one.
        for n in self.nodes.values():
            if n.up and n.applied >= self.final_index:
                self.check.final_state(n.id, n.state_set)


def run_seed(seed: int, cfg: SimConfig | None = None) -> SeedResult:
    cfg = cfg or SimConfig()
    cls = Simulation
    if cfg.workload == "failover":
        from .failover_sim import FailoverSimulation as cls  # it builds on this module
    res = cls(seed, cfg).run()
    if not res.ok and not cfg.trace:
        # Replay the same seed with tracing on: the run is deterministic, so the trace
        # shows exactly the failing execution.
        from dataclasses import replace

        traced = cls(seed, replace(cfg, trace=True)).run()
        res.trace = traced.trace
        if traced.violation != res.violation:
            res.trace.append(f"(replay diverged: {traced.violation})")
    return res
