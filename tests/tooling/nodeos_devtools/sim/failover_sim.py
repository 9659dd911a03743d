"""The failover workload (`SimConfig.workload = "failover"`): leases, the real failover
controller and map, simulated agents, a simulated data plane and a host, under faults.

The Raft nodes are the storage nodes. Every node starts from one map (a snapshot at index 1:
members, pools, 2-4 ready volumes of 2-3 replicas) and applies the committed entries to its
own `ClusterMap`. Each node runs a `SimFailoverAgent` and a `SimLeaderShell`
(failover_agent.py, failover_leader.py) on its own clock (each node's clock runs at its own rate, within
`drift`); their messages travel the simulated network (partitions, loss, delay, and for data
messages now and then a long stall, as a command stuck in a queue). The host (`SimHost`,
failover_data.py) writes through whichever node it believes is the optimized primary.

Faults: the Raft simulator's (partitions, one-way cuts, crashes losing unsynced writes,
leader transfers, lossy networks), with its membership changes replaced by failover faults:
a primary cut off from the cluster or from everyone (the host too), the leader and a primary
together in a minority, a primary down for longer than its lease. Then the settle phase
(network healed, every node restarted) and a quiet period.

Invariants:
1. at most one node is writable (believes it is the primary, unfenced) per volume: after
   every agent step (writability changes only there, and at crashes);
2. every acknowledged write is on every replica the map marks in-sync: at every
   acknowledgement and after every map entry applied (against the most advanced map);
3. no write of an older epoch lands on a replica that moved to a newer one: at every write;
4. after the faults heal and a quiet period every volume is healthy: its primary up and
   writable, in_sync == placement, a write acknowledged since the heal: at the end.
5-6. the deleted volumes (sim_plane.py, which also holds each node's simulated kernel and
   kills nodeosd alone): each torn down within its bound after the heal, nothing left behind.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import msgpack

from nodeos.cluster import features
from nodeos.cluster.leader_contact import LEADER_MESSAGES, LeaderContact
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.raft import HardState, MemoryStorage, Message, Snapshot, SnapshotMeta, StateRole
from nodeos.cluster.raft.types import ConfState
from nodeos.control import decide
from nodeos.storage.failover import LeaseTiming
from nodeos.storage.failover_map import in_sync_of
from nodeos.storage.lookup import health_of

from .cluster import Simulation
from .config import SeedResult, SimConfig
from .epochbroken import epoch_bug
from .events import HEAL
from .failover_broken import failover_bug
from .failover_data import HOST, HOST_GAP_MS, SimDataPlane, SimHost, check_acked_on_in_sync
from .failover_faults import (
    FO_DRAIN,
    FO_REPLAY,
    FO_UNCUT,
    LongCut,
    drain_step,
    failover_fault,
    maybe_replay_report,
    reapply_cuts,
    replay_report,
    starved,
    uncut,
    undrain_all,
)
from .failover_handoff import HandoffAgent
from .failover_leader import SimLeaderShell, propose
from .invariants import Violation
from .node import SimNode
from .sim_plane import FO_PLANE, SETTLE_MS, Plane

FO_TICK, FO_MSG, FO_HOST = 100, 101, 102
AGENT_TICK_MS = 50
LEASE_S = 1.0
# the cluster network; the rest: storage
CONTROL_KINDS = ("lease", "lease_ok", "lease_no", "report", "contact", "contact_ok")
DATA_KINDS = ("leg", "leg_ok", "leg_no", "write", "w_ok", "w_no", "resync")
GIB = 1024**3
STATS = (
    "lease_grants",
    "lease_failures",
    "fences",
    "promotions",
    "demotions",
    "rebuilds",  # full copies onto a leg (new to its md)
    "rebuild_lbas",
    "partial_resyncs",  # a leg back in the same md: only the regions md's bitmap holds copied
    "partial_resync_lbas",
    "failovers",
    "long_partitions",
    "long_crashes",
    "suspects",
    "leg_writes_held",  # behind an earlier write to the same block on the leg (md serialize_policy)
    "drains",
    "handoffs",
    "planned_failovers",
    "report_replays",
    "kept_open",  # a fenced node's primaries left unfenced: the only in-sync replica (issue 29)
    "holds",  # suspects the leader kept up past the grace: nothing to fail over to (issue 29)
    "starved",
    "lease_floors",  # new leaders that learnt from a majority when older leaders last reached them
)


def failover_config(**kw: Any) -> SimConfig:
    """The failover workload's defaults: 5 s of faults, 12 s to heal."""
    base = {"workload": "failover", "duration_ms": 5000, "settle_ms": 12000}
    return SimConfig(**{**base, **kw})


def build_map(nodes: int, rng: random.Random) -> tuple[ClusterMap, list[str]]:
    """The starting map, made by real commands: members, a pool each, ready volumes."""
    m = ClusterMap()
    index = 0

    def apply(cmd: str, args: dict[str, Any]) -> None:
        nonlocal index
        index += 1
        out = m.apply(index, encode_command(cmd, args))
        if "error" in out:
            raise RuntimeError(f"setup {cmd}: {out['error']}")

    # At this release's feature level, as `cluster init` starts one: the leader proposes the
    # commands' newest versions (features.version_for), as the product's does.
    apply("init_cluster", {"cluster_id": "sim-cluster", "feature_level": features.LEVEL})
    ids = list(range(1, nodes + 1))
    for nid in ids:
        apply(
            "add_node",
            {"node_id": nid, "addresses": {"peer": f"10.0.0.{nid}:7100"}, **features.member_report()},
        )
    for nid in ids:
        p = {"node": f"node-{nid}", "name": "p0", "drives": ["d0"], "devices": ["/dev/sim0"]}
        apply(*decide.pool_create(m.state, p, f"p{nid}"))

    def report(nid: int, seq: int) -> None:
        pools = {
            p["pool_id"]: {"name": p["name"], "state": "ready", "size_bytes": 1 << 40, "free_bytes": 1 << 39}
            for p in m.state["pools"].values()
            if p["node"] == nid
        }
        replicas = {}
        for uuid, v in m.state["volumes"].items():
            nodes_of = [s["node"] for s in v["placement"]]
            if nid in nodes_of:
                r = {"state": "in-sync", "size_bytes": v["size_bytes"], "hosts": [], "error": None}
                r["epoch"] = v["epoch"]
                if v["primary"] == nid:
                    r["members"] = {x: "in-sync" for x in nodes_of if x != nid}
                replicas[uuid] = r
        body = {"node_id": nid, "seq": seq, "pools": pools, "replicas": replicas, "snapshots": {}}
        apply("node_report", {**body, "dataplane": {"name": "sim", "listeners": [], "error": None}})

    for nid in ids:
        report(nid, 1)
    vols = []
    for i in range(rng.choice((2, 3, 4))):
        k = rng.choice((2, 3)) if nodes >= 3 else 2
        p = {"name": f"v{i}", "size": GIB, "replicas": k, "spread": "node"}
        uuid = f"00000000-0000-4000-8000-{i:012d}"
        apply(*decide.volume_create(m.state, p, uuid))
        vols.append(uuid)
    for nid in ids:
        report(nid, 2)
    for uuid in vols:
        vol = m.state["volumes"][uuid]
        if vol["state"] != "ready" or in_sync_of(vol) != [s["node"] for s in vol["placement"]]:
            raise RuntimeError(f"setup: volume {vol['name']} is {vol['state']}, in-sync {in_sync_of(vol)}")
    return m, vols


class FailoverSimulation(Simulation):
    def __init__(self, seed: int, cfg: SimConfig) -> None:
        self.frng = random.Random(seed * 1_000_003 + 17)
        r = self.frng
        self.timing = LeaseTiming(LEASE_S)
        self.map0, self.vols = build_map(cfg.nodes, r)
        self.plane = Plane(seed, cfg.nodes)  # kernels, records, deletes (sim_plane.py)
        self.plane.add_doomed(self.map0)
        self.dp = SimDataPlane()
        self.host = SimHost(random.Random(r.getrandbits(64)))
        drift = r.choice((0.0, 0.01, 0.03))
        self.rate = {n: 1 + r.uniform(-drift, drift) for n in range(1, cfg.nodes + 1)}
        self.offset = {n: r.uniform(0, 1000) for n in range(1, cfg.nodes + 1)}
        self.stall_p = r.choice((0.0, 0.02, 0.1))  # a data message stuck in a queue
        self.classic = cfg.failover_faults == "classic"
        self.starving_mix = cfg.failover_faults == "starved"  # the drain mix and starved nodes
        self.starving: dict[int, int] = {}  # node -> until when its lease messages are lost or late
        self.replay_p = 0.0 if self.classic else r.choice((0.0, 0.05, 0.2))  # failover_faults.py
        self.long_cuts: list[LongCut] = []
        self.agents: dict[int, HandoffAgent] = {}
        self.shells: dict[int, SimLeaderShell] = {}
        self.contacts: dict[int, LeaderContact] = {}  # nodeos/cluster/leader_contact.py, per life
        self.next_ctx = 0
        self.max_applied = 0
        self.settled_at: int | None = None
        self.next_health_check = 0
        self.acked_after_settle = 0
        self.epochs: dict[str, int] = {}
        self.prims: dict[str, int] = {}  # volume -> its primary in the most advanced map
        self.storage_ok: set[tuple[int, int]] = set()  # links cut for the cluster network only
        super().__init__(seed, replace(cfg, disrupt=False, settle_ms=max(cfg.settle_ms, SETTLE_MS)))
        self.stats.update(dict.fromkeys(STATS, 0))
        for uuid in self.vols:
            vol = self.map0.state["volumes"][uuid]
            self.host.add(uuid, [s["node"] for s in vol["placement"]], vol["primary"])
            self.host.start(self, uuid)
        self.plane.start(self)

    # --- the run ---
    def run(self) -> SeedResult:
        with failover_bug(self.cfg.broken), epoch_bug(self.cfg.broken):
            res = super().run()
        res.stats.update(self.host.stats)
        return res

    def _bootstrap(self, disk: MemoryStorage, ids: list[int]) -> None:
        data = msgpack.packb({"applied": [], "map": self.map0.snapshot()}, use_bin_type=True)
        snap = Snapshot(SnapshotMeta(index=1, term=1, conf_state=ConfState(tuple(sorted(ids)), ())), data)
        disk.persist(HardState(term=1, vote=0, commit=1), [], snap)

    def clock(self, nid: int) -> float:
        """Node `nid`'s monotonic clock, in seconds."""
        return (self.now * self.rate[nid] + self.offset[nid]) / 1000.0

    def _start(self, nid: int, first_tick: int) -> None:
        super()._start(nid, first_tick)
        n = self.nodes[nid]
        self.agents[nid] = HandoffAgent(nid, self.timing, self.cfg.broken, self.clock(nid))
        self.shells[nid] = SimLeaderShell(self.timing)
        self.contacts[nid] = LeaderContact(started=self.clock(nid))  # what this life heard
        self._at(self.now + self.frng.randint(1, AGENT_TICK_MS), FO_TICK, (nid, n.incarnation))

    def _schedule_faults(self) -> None:
        # The Raft simulator's density is for 1.5 s runs; failover needs leases to run out and
        # come back, so faults are sparser and new leaders are crashed less often.
        r = self.frng
        # A leader change restarts every lease (the new leader counts from its own start), so a
        # dense schedule hardly ever lets one run out: one seed in eight saw a failover.
        gaps = (
            ((150, 600), (300, 1000), (600, 2000))
            if self.classic
            else ((300, 1000), (600, 2000), (900, 2500))
        )
        self.fault_gap = r.choice(gaps)
        self.crash_new_leader = r.choice((0.0, 0.0, 0.1))
        self.crash_after_commit = r.choice((0.0, 0.0, 0.05))
        super()._schedule_faults()

    def _schedule_clients(self) -> None:
        pass  # the writes are the host's; the map commands are the agents' and the controller's

    def _dispatch(self, kind: int, payload: Any) -> None:
        if kind == FO_TICK:
            self._agent_tick(*payload)
        elif kind == FO_MSG:
            self._fo_deliver(*payload)
        elif kind == FO_HOST:
            self._host_event(*payload)
        elif kind == FO_UNCUT:
            uncut(self)
        elif kind == FO_DRAIN:
            drain_step(self, *payload) if payload is not None else undrain_all(self)
        elif kind == FO_REPLAY:
            replay_report(self, payload)
        elif kind == FO_PLANE:
            self.plane.on_event(self, payload)
        else:
            if kind == HEAL:
                self.storage_ok.clear()
            super()._dispatch(kind, payload)
            if kind == HEAL:
                reapply_cuts(self)  # a short partition's heal does not end a long cut

    # --- plumbing for the agents ---
    def leader_of(self, nid: int) -> int:
        rn = self.nodes[nid].rn
        return rn.raft.lead if rn is not None else 0

    def fo_send(self, kind: str, frm: int, to: int, body: dict[str, Any], data: bool = False) -> None:
        if frm == to:
            self._at(self.now, FO_MSG, (kind, frm, to, body))
            return
        storage = kind not in CONTROL_KINDS
        if storage and (frm, to) in self.storage_ok:
            times = [self.now + self.frng.randint(1, 5)]
        else:
            times = self.net.arrivals(self.now, frm, to)
        times = starved(self, kind, frm, to, times)
        if data or kind in DATA_KINDS:
            times = times[:1]  # a connection (TCP) does not duplicate; it may stall
            if times and self.stall_p and self.frng.random() < self.stall_p:
                times[0] += self.frng.randint(300, 2500)
        for t in times:
            self._at(t, FO_MSG, (kind, frm, to, body))
        if kind == "report":
            maybe_replay_report(self, body)

    def fo_propose(self, n: SimNode, cmd: bytes) -> bytes | None:
        return propose(self, n, cmd)

    def _fo_deliver(self, kind: str, frm: int, to: int, body: dict[str, Any]) -> None:
        if not self.net.can_pass(frm, to) and not (
            kind not in CONTROL_KINDS and (frm, to) in self.storage_ok
        ):
            return
        if to == HOST:
            self._host_answer(kind, body)
            return
        if kind == "write" and body["conn"] != self.host.conn.get(to, 0):
            return  # sent on a connection the host has torn down since: it never arrives
        n = self.nodes[to]
        if not n.up or n.rn is None:
            self.plane.deliver(self, kind, frm, to, body)  # nodeosd alone dead: the kernel answers
            return
        if kind == "lease":
            self.shells[to].lease_request(self, n, frm, body["req"])
        elif kind == "contact":  # failover_loop.contact: only once its own (written) term is T
            term = n.disk.initial_state()[0].term
            if term >= body["term"]:
                ago = self.clock(to) - self.contacts[to].last_before(body["term"])
                self.fo_send("contact_ok", to, frm, {"term": body["term"], "ago": ago})
        elif kind == "contact_ok":
            self.shells[to].contact_answer(self, n, frm, body)
        elif kind == "report":
            if n.rn.raft.state.name == "LEADER":
                propose(self, n, body["cmd"])
        else:
            self.agents[to].on_message(self, n, kind, frm, body)

    def _deliver(self, m: Message) -> None:
        n = self.nodes[m.to]
        if n.up and self.net.can_pass(m.frm, m.to) and m.type in LEADER_MESSAGES:
            self.contacts[m.to].note(m.term, self.clock(m.to))  # as the driver's on_raft
        super()._deliver(m)

    def _after_input(self, n: SimNode) -> None:
        super()._after_input(n)
        r = n.rn.raft if n.rn is not None else None
        if r is not None and r.state is StateRole.LEADER:  # as the driver after each Ready
            self.contacts[n.id].note(r.term, self.clock(n.id))

    def _agent_tick(self, nid: int, inc: int) -> None:
        n = self.nodes[nid]
        if not n.up or n.incarnation != inc:
            return
        self._catch_up(n)
        now = self.clock(nid)
        self.agents[nid].tick(self, n, now)
        self.shells[nid].tick(self, n, now)
        self._check_one_writer()
        self._at(self.now + AGENT_TICK_MS, FO_TICK, (nid, inc))

    def _finish_reads(self, n: SimNode) -> None:
        for ctx, pr in list(n.reads.items()):
            if pr.index >= 0 and n.applied >= pr.index:
                del n.reads[ctx]
                self.check.read_done(n.id, ctx, pr.issued_acked, n.state_set)
                self.stats["reads"] += 1
                if ctx in self.shells[n.id].barriers:
                    self.shells[n.id].barrier_done(self, n, ctx)

    # --- the host ---
    def _host_event(self, uuid: str, attempt: int | None) -> None:
        self.host.event(self, uuid, attempt)  # failover_data.py

    def _host_answer(self, kind: str, body: dict[str, Any]) -> None:
        uuid = body["vol"]
        w = self.host.answer(self, kind, body)
        if w is None:
            return
        self.acked_after_settle += self.settled_at is not None
        st = self._latest_map()
        if st["applied_index"] == self.max_applied:  # (all maps behind after restarts: the next apply checks)
            check_acked_on_in_sync(st, self.dp, self.host, f"write v{w.version} acknowledged")
        self._at(self.now + self.frng.randint(*HOST_GAP_MS), FO_HOST, (uuid, None))

    # --- checks ---
    def _latest_map(self) -> dict[str, Any]:
        best = max(
            (n for n in self.nodes.values() if n.cmap is not None),
            key=lambda n: n.cmap.state["applied_index"],
        )  # type: ignore[union-attr]
        assert best.cmap is not None
        return best.cmap.state

    def _map_applied(self, n: SimNode) -> None:
        assert n.cmap is not None
        st = n.cmap.state
        if st["applied_index"] <= self.max_applied:
            return
        self.max_applied = st["applied_index"]
        check_acked_on_in_sync(st, self.dp, self.host, f"map entry {st['applied_index']} applied on n{n.id}")
        for uuid in self.vols:
            vol = st["volumes"][uuid]
            epoch = vol["epoch"]
            moved = epoch > self.epochs.get(uuid, epoch)
            self.stats["failovers"] += moved
            self.stats["planned_failovers"] += moved and health_of(st, self.prims.get(uuid, 0)) == "up"
            self.prims[uuid] = vol["primary"]
            self.epochs[uuid] = max(epoch, self.epochs.get(uuid, epoch))

    def _check_one_writer(self) -> None:
        for uuid in self.vols:
            w = [nid for nid, a in self.agents.items() if self.nodes[nid].up and a.writable(uuid)]
            if len(w) > 1:
                eps = {nid: self.agents[nid].mirrors[uuid].epoch for nid in w}
                raise Violation("two writable primaries", f"volume {uuid[-4:]}: nodes {w} at epochs {eps}")

    def unhealthy(self) -> list[str]:
        st = self._latest_map()
        out = []
        for uuid in self.vols:
            vol = st["volumes"][uuid]
            nodes = [s["node"] for s in vol["placement"]]
            prim = vol["primary"]
            a = self.agents.get(prim)
            if health_of(st, prim) != "up":
                out.append(f"{vol['name']}: primary n{prim} is down")
            elif in_sync_of(vol) != nodes:
                out.append(f"{vol['name']}: in-sync {in_sync_of(vol)} of {nodes}")
            elif a is None or not self.nodes[prim].up or not a.writable(uuid):
                out.append(f"{vol['name']}: primary n{prim} not writable")
        if self.acked_after_settle == 0:
            out.append("no write acknowledged since the heal")
        out += self.plane.unhealthy(self)
        return out

    def _finished(self) -> bool:
        if self.settled_at is None or self.now < self.next_health_check:
            return False
        self.next_health_check = self.now + 10  # looked at every 10 ms of virtual time
        return not self.unhealthy()

    def _settle(self) -> None:
        self.long_cuts = []  # (a starved node stays so for its time: it is no fault of the network)
        super()._settle()
        self.settled_at = self.now
        undrain_all(self)

    def _final_check(self) -> None:
        # The agents and the controller propose after the final command too: every node that
        # applied the last acknowledged command must hold every acknowledged one.
        last = max(self.check.acked_index.values(), default=0)
        self.final_index = max(self.final_index, last)
        super()._final_check()
        self.plane.final_check(self)  # teardown bound, nothing left behind (sim_plane.py)
        bad = self.unhealthy()
        if bad:
            raise Violation("not healthy", f"{self.cfg.settle_ms} ms after the heal: " + "; ".join(bad))
        self.stats["heal_ms"] = self.now - (self.settled_at or 0)

    # --- faults ---
    def _fault(self, x: float) -> None:
        if (
            not (0.55 if self.classic else 0.45) <= x < 0.75
        ):  # in place of membership changes (and one-way cuts)
            super()._fault(x)  # (no membership changes: the storage nodes are the voters)
            return
        failover_fault(self)
