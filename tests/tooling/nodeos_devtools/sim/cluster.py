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

from nodeos.cluster.map import ClusterMap, decode_command, encode_command
from nodeos.cluster.raft import (
    ProposalDropped,
    StateRole,
    bootstrap_storage,
)
from nodeos.cluster.raft.storage import MemoryStorage
from nodeos.cluster.raft_logfile import LogFileRaftStorage
from nodeos.cluster.raft_storage import LmdbRaftStorage

from .config import SeedResult, SimConfig
from .disruption import Disruption, DisruptionMixin
from .events import CLIENT, CRASH, DELIVER, DONE, FAULT, FINAL, HEAL, REJOIN, RESTART, SETTLE, SYNC, TICK
from .faults import FaultsMixin
from .invariants import Checker, Violation
from .mapbroken import map_bug
from .mapcheck import MapChecker
from .mapload import DecisionViolation, MapWorkload
from .network import NetworkFaults, SimNetwork
from .node import PendingRead, SimNode
from .ready import ReadyMixin
from .ticks import TicksMixin


class Simulation(ReadyMixin, FaultsMixin, DisruptionMixin, TicksMixin):
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
    elif cfg.workload == "voters":
        from .voters_sim import VoterSimulation as cls
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
