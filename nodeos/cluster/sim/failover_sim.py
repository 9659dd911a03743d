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
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import msgpack

from nodeos.cluster.failover import LeaseTiming
from nodeos.cluster.failover_map import health_of, in_sync_of
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.raft import HardState, MemoryStorage, Snapshot, SnapshotMeta
from nodeos.cluster.raft.types import ConfState
from nodeos.control import decide

from .cluster import Simulation
from .config import SeedResult, SimConfig
from .events import HEAL, RESTART
from .failover_agent import SimFailoverAgent
from .failover_broken import failover_bug
from .failover_data import HOST, HOST_GAP_MS, HOST_TIMEOUT_MS, SimDataPlane, SimHost, check_acked_on_in_sync
from .failover_leader import SimLeaderShell, propose
from .invariants import Violation
from .node import SimNode

FO_TICK, FO_MSG, FO_HOST = 100, 101, 102
AGENT_TICK_MS = 50
LEASE_S = 1.0
CONTROL_KINDS = ("lease", "lease_ok", "lease_no", "report")  # the cluster network; the rest: storage
DATA_KINDS = ("leg", "leg_ok", "leg_no", "write", "w_ok", "w_no", "resync")
GIB = 1024**3
STATS = (
    "lease_grants",
    "lease_failures",
    "fences",
    "promotions",
    "demotions",
    "rebuilds",
    "failovers",
    "long_partitions",
    "long_crashes",
    "suspects",
    "leg_writes_held",  # behind an earlier write to the same block on the leg (md serialize_policy)
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

    apply("init_cluster", {"cluster_id": "sim-cluster"})
    ids = list(range(1, nodes + 1))
    for nid in ids:
        apply("add_node", {"node_id": nid, "addresses": {"peer": f"10.0.0.{nid}:7100"}})
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
        self.dp = SimDataPlane()
        self.host = SimHost(random.Random(r.getrandbits(64)))
        drift = r.choice((0.0, 0.01, 0.03))
        self.rate = {n: 1 + r.uniform(-drift, drift) for n in range(1, cfg.nodes + 1)}
        self.offset = {n: r.uniform(0, 1000) for n in range(1, cfg.nodes + 1)}
        self.stall_p = r.choice((0.0, 0.02, 0.1))  # a data message stuck in a queue
        self.agents: dict[int, SimFailoverAgent] = {}
        self.shells: dict[int, SimLeaderShell] = {}
        self.next_ctx = 0
        self.max_applied = 0
        self.settled_at: int | None = None
        self.next_health_check = 0
        self.acked_after_settle = 0
        self.epochs: dict[str, int] = {}
        self.storage_ok: set[tuple[int, int]] = set()  # links cut for the cluster network only
        super().__init__(seed, replace(cfg, disrupt=False))
        self.stats.update(dict.fromkeys(STATS, 0))
        for uuid in self.vols:
            vol = self.map0.state["volumes"][uuid]
            self.host.add(uuid, [s["node"] for s in vol["placement"]], vol["primary"])
            self._at(self.frng.randint(1, 50), FO_HOST, (uuid, None))

    # --- the run ---
    def run(self) -> SeedResult:
        with failover_bug(self.cfg.broken):
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
        self.agents[nid] = SimFailoverAgent(nid, self.timing, self.cfg.broken, self.clock(nid))
        self.shells[nid] = SimLeaderShell(self.timing)
        self._at(self.now + self.frng.randint(1, AGENT_TICK_MS), FO_TICK, (nid, n.incarnation))

    def _schedule_faults(self) -> None:
        # The Raft simulator's density is for 1.5 s runs; failover needs leases to run out and
        # come back, so faults are sparser and new leaders are crashed less often.
        r = self.frng
        self.fault_gap = r.choice(((150, 600), (300, 1000), (600, 2000)))
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
        else:
            if kind == HEAL:
                self.storage_ok.clear()
            super()._dispatch(kind, payload)

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
        if data or kind in DATA_KINDS:
            times = times[:1]  # a connection (TCP) does not duplicate; it may stall
            if times and self.stall_p and self.frng.random() < self.stall_p:
                times[0] += self.frng.randint(300, 2500)
        for t in times:
            self._at(t, FO_MSG, (kind, frm, to, body))

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
            return
        if kind == "lease":
            self.shells[to].lease_request(self, n, frm, body["req"])
        elif kind == "report":
            if n.rn.raft.state.name == "LEADER":
                propose(self, n, body["cmd"])
        else:
            self.agents[to].on_message(self, n, kind, frm, body)

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
        if attempt is None:
            w = self.host.next_write(uuid, self.now)
        elif attempt < 0:
            w = self.host.failed(uuid, -attempt, self.now)  # refused: the next path, a little later
        else:
            hv = self.host.vols[uuid]
            if hv.write is None or hv.write.attempt != attempt:
                return
            w = self.host.failed(uuid, attempt, self.now, timeout=True)
        if w is None:
            return
        conn = self.host.conn.get(w.target, 0)
        body = {"vol": uuid, "lba": w.lba, "version": w.version, "attempt": w.attempt, "conn": conn}
        self.fo_send("write", HOST, w.target, body)
        self._at(self.now + HOST_TIMEOUT_MS, FO_HOST, (uuid, w.attempt))

    def _host_answer(self, kind: str, body: dict[str, Any]) -> None:
        uuid, attempt = body["vol"], body["attempt"]
        if kind == "w_no":
            hv = self.host.vols[uuid]
            if hv.write is not None and hv.write.attempt == attempt:
                self._at(self.now + 20, FO_HOST, (uuid, -attempt))
            return
        w = self.host.acked(uuid, attempt)
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
            epoch = st["volumes"][uuid]["epoch"]
            self.stats["failovers"] += epoch > self.epochs.get(uuid, epoch)
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
        return out

    def _finished(self) -> bool:
        if self.settled_at is None or self.now < self.next_health_check:
            return False
        self.next_health_check = self.now + 10  # looked at every 10 ms of virtual time
        return not self.unhealthy()

    def _settle(self) -> None:
        super()._settle()
        self.settled_at = self.now

    def _final_check(self) -> None:
        # The agents and the controller propose after the final command too: every node that
        # applied the last acknowledged command must hold every acknowledged one.
        last = max(self.check.acked_index.values(), default=0)
        self.final_index = max(self.final_index, last)
        super()._final_check()
        bad = self.unhealthy()
        if bad:
            raise Violation("not healthy", f"{self.cfg.settle_ms} ms after the heal: " + "; ".join(bad))
        self.stats["heal_ms"] = self.now - (self.settled_at or 0)

    # --- faults ---
    def _fault(self, x: float) -> None:
        if not 0.55 <= x < 0.75:
            super()._fault(x)  # but no membership changes: the storage nodes are the voters
            return
        r = self.frng
        st = self._latest_map()
        lead = self.leader()
        prims = sorted({st["volumes"][u]["primary"] for u in self.vols})
        ids = sorted(self.nodes)
        y = r.random()
        if y < 0.6:
            if y < 0.3:
                side = [r.choice(prims)]
            elif lead is not None and len(ids) >= 5:
                others = [p for p in prims if p != lead.id]
                side = [lead.id, r.choice(others)] if others else [lead.id]
            else:
                side = [lead.id] if lead is not None else [r.choice(prims)]
            rest = [i for i in ids if i not in side]
            self.net.partition(side, rest)
            how = r.random()
            if how < 0.4:
                self.net.partition(side, [HOST])  # cut off from everyone, the host too
            elif how < 0.7:  # the cluster network only: the storage network still carries data
                self.storage_ok |= {(a, b) for a in side for b in rest} | {(b, a) for a in side for b in rest}
            self.stats["long_partitions"] += 1
            self.log(f"failover fault: partition {side} | rest ({how:.2f})")
            self._at(self.now + r.randint(800, 3000), HEAL, None)
        else:
            victim = self.nodes[r.choice(prims)]
            if victim.up:
                victim.crash()
                self.stats["crashes"] += 1
                self.stats["long_crashes"] += 1
                self.log(f"failover fault: n{victim.id} down for long")
                self._at(self.now + r.randint(800, 3000), RESTART, victim.id)
