"""What the failover workload adds around the nodes' data planes: each node's kernel and its
records (which outlive nodeosd), volumes deleted under faults, nodeosd-only deaths, and the
teardown checks. `FailoverSimulation` holds one `Plane` and calls it at a few points.

- kernels: a node's `SimKernel` survives a death of nodeosd alone (its exports, md and front end
  keep serving, the legs requeue, the lease fences the node) and is lost with the node;
  records (the agent's intents and local state, on disk) survive both.
- deletes: one or two more volumes ("d0", "d1") that the host writes to like the others are
  deleted through the leader at some moment of the fault phase (`volume_delete` as the
  console decides it); the host stops writing there.
- blips (the drain mix, issue 29): a replica's node cut off from the other nodes for 2-3.2 s,
  back well before the faults stop (the settle may power every node off, and a restarted
  primary's new md copies every leg in full): the leg watch cuts its legs while it is away, and
  they rejoin the same md, which copies back only the regions its bitmap holds (sim_md.py).
- checks, once faults heal (the settle phase):
  * teardown bound: a deleted volume is gone from the map and from every node within
    TEARDOWN_BOUND_S of the later of its delete and the heal: the agent's wait bound
    (sim_teardown.TEARDOWN_WAIT) plus two report intervals plus a second ("teardown hung");
  * nothing left behind: once the map dropped a deleted volume, no node holds a record, an
    export, a mirror or a replica's blocks of it ("left behind");
  * "two writable primaries" for the deleted volumes too, until they are deleting.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.control import decide

from .events import RESTART
from .failover_faults import FO_UNCUT, LONG_MS, LongCut
from .failover_leader import propose
from .invariants import Violation
from .sim_kernel import KERNEL_KINDS, SimKernel
from .sim_teardown import TEARDOWN_WAIT

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation

FO_PLANE = 110
GIB = 1024**3
REPORT_EVERY_S = 1.0
TEARDOWN_BOUND_S = TEARDOWN_WAIT + 2 * REPORT_EVERY_S + 1.0
SETTLE_MS = int(TEARDOWN_BOUND_S * 1000) + 3000  # room for the bound after a late delete commits
KTICK_MS = 50
CHECK_MS = 100
DELETE_RETRY_MS = 300
# A blip outlasts the leg's cut (its controller not live 0.5 s, then LEG_DOWN_S, the report's
# commit: about 1.9 s), so md writes without it for a while; it ends this long before the faults
# stop at the latest, room for the leg to rejoin and be resynced.
BLIP_P = 0.6
BLIP_MS = (2000, 3200)
BLIP_FROM_MS = 300
BLIP_BACK_MS = 600


class Plane:
    def __init__(self, seed: int, nodes: int) -> None:
        self.rng = random.Random(seed * 7_919 + 29)  # apart from the workload's own draws
        self.nodes = nodes
        self.kernels: dict[int, SimKernel] = {}
        self.records: dict[int, dict[str, dict[str, Any]]] = {n: {} for n in range(1, nodes + 1)}
        self.daemon_dead: set[int] = set()
        self.doomed: list[str] = []
        self.deleted_at: dict[str, int] = {}  # uuid -> virtual ms its delete was seen applied
        self.done: set[str] = set()
        self.stats = {"teardowns_done": 0, "daemon_deaths": 0, "replica_cuts": 0, "replica_blips": 0}
        # The blips draw from their own generator: the other faults' draws stay as they were.
        self.brng = random.Random(seed * 7_919 + 31)

    # --- set-up ---
    def add_doomed(self, m: ClusterMap) -> None:
        """More volumes in the starting map, to be deleted under faults."""
        index = m.state["applied_index"]

        def apply(cmd: str, args: dict[str, Any]) -> None:
            nonlocal index
            index += 1
            out = m.apply(index, encode_command(cmd, args))
            if "error" in out:
                raise RuntimeError(f"setup {cmd}: {out['error']}")

        for i in range(self.rng.choice((1, 2))):
            k = self.rng.choice((2, 3)) if self.nodes >= 3 else 2
            uuid = f"00000000-0000-4000-8000-{100 + i:012d}"
            apply(*decide.volume_create(m.state, {"name": f"d{i}", "size": GIB, "replicas": k}, uuid))
            self.doomed.append(uuid)
        for nid in range(1, self.nodes + 1):
            held = m.state["reports"][nid]
            reps = dict(held["replicas"])
            for uuid in self.doomed:
                v = m.state["volumes"][uuid]
                nodes = [s["node"] for s in v["placement"]]
                if nid in nodes:
                    r = {
                        "state": "in-sync",
                        "size_bytes": v["size_bytes"],
                        "hosts": [],
                        "error": None,
                        "epoch": 1,
                    }
                    if v["primary"] == nid:
                        r["members"] = {x: "in-sync" for x in nodes if x != nid}
                    reps[uuid] = r
            body = {k: held[k] for k in ("pools", "snapshots") if k in held}
            apply("node_report", {**body, "node_id": nid, "seq": held["seq"] + 1, "replicas": reps,
                                  "dataplane": {"name": "sim", "listeners": [], "error": None}})  # fmt: skip
        for uuid, v in m.state["volumes"].items():
            for s in v["placement"]:
                role = "primary" if v["primary"] == s["node"] else "secondary"
                rec = {"uuid": uuid, "role": role, "epoch": v["epoch"], "state": "ready"}
                self.records[s["node"]][uuid] = {**rec, "size_bytes": v["size_bytes"]}

    def start(self, sim: FailoverSimulation) -> None:
        st = sim.map0.state
        for uuid in self.doomed:
            vol = st["volumes"][uuid]
            sim.host.add(uuid, [s["node"] for s in vol["placement"]], vol["primary"])
            sim.host.start(sim, uuid)
            sim._at(self.rng.randint(200, max(300, sim.cfg.duration_ms)), FO_PLANE, ("delete", uuid))
        for _ in range(self.rng.choice((0, 1, 1, 2))):
            sim._at(self.rng.randint(200, max(300, sim.cfg.duration_ms - 500)), FO_PLANE, ("die", 0))
        for _ in range(self.rng.choice((0, 0, 1))):
            sim._at(self.rng.randint(200, max(300, sim.cfg.duration_ms - 500)), FO_PLANE, ("cut", 0))
        if not sim.classic and not sim.starving_mix and self.brng.random() < BLIP_P:
            last = max(BLIP_FROM_MS + 100, sim.cfg.duration_ms - BLIP_MS[1] - BLIP_BACK_MS)
            sim._at(self.brng.randint(BLIP_FROM_MS, last), FO_PLANE, ("blip", 0))
        sim._at(CHECK_MS, FO_PLANE, ("check", 0))

    def attach(self, nid: int, broken: str | None) -> SimKernel:
        """The kernel a (re)started agent finds: the same after nodeosd alone died, else new."""
        if nid in self.daemon_dead and nid in self.kernels:
            self.daemon_dead.discard(nid)
        else:
            self.kernels[nid] = SimKernel(nid, broken)
        return self.kernels[nid]

    # --- events ---
    def on_event(self, sim: FailoverSimulation, payload: tuple[str, Any]) -> None:
        what, arg = payload
        if what == "delete":
            self._delete(sim, arg)
        elif what == "die":
            self._die(sim, arg)
        elif what == "cut":
            self._cut_replica(sim)
        elif what == "blip":
            self._cut_replica(sim, self.brng, BLIP_MS)
        elif what == "ktick":
            nid, inc = arg
            n = sim.nodes[nid]
            if nid in self.daemon_dead and not n.up and n.incarnation == inc:
                self.kernels[nid].tick(sim, sim.clock(nid))
                sim._at(sim.now + KTICK_MS, FO_PLANE, ("ktick", arg))
        elif what == "check":
            self._check(sim)
            sim._at(sim.now + CHECK_MS, FO_PLANE, ("check", 0))

    def deliver(self, sim: FailoverSimulation, kind: str, frm: int, to: int, body: dict[str, Any]) -> bool:
        """A data message to a node whose nodeosd alone is dead: its kernel answers."""
        if to in self.daemon_dead and kind in KERNEL_KINDS and not sim.nodes[to].up:
            self.kernels[to].on_message(sim, kind, frm, body)
            return True
        return False

    def _delete(self, sim: FailoverSimulation, uuid: str) -> None:
        st = sim._latest_map()
        vol = st["volumes"].get(uuid)
        if vol is None or vol["state"] == "deleting":
            return
        lead = sim.leader()
        if lead is not None and lead.cmap is not None:
            try:
                cmd = decide.volume_delete(lead.cmap.state, {"name": vol["name"]})
            except Exception:  # the console refuses (an operation pending): the operator retries
                cmd = None
            if cmd is not None:
                propose(sim, lead, encode_command(*cmd))
        sim._at(sim.now + DELETE_RETRY_MS, FO_PLANE, ("delete", uuid))

    def _die(self, sim: FailoverSimulation, nid: int = 0) -> None:
        """nodeosd alone dies (Raft, lease, agent) on node `nid`, else on a primary's node, the
        leader's if no other (a new leader starts every lease afresh: fewer failovers); the
        kernel keeps serving."""
        st = sim._latest_map()
        lead = sim.leader()
        prims = {v["primary"] for v in st["volumes"].values()}
        up = [n for n in sorted(prims) if sim.nodes[n].up and n in self.kernels]
        up = [n for n in up if lead is None or n != lead.id] or up
        if nid and (not sim.nodes[nid].up or nid not in self.kernels):
            return
        if not nid and not up:
            return
        nid = nid or self.rng.choice(up)
        n = sim.nodes[nid]
        n.crash()
        self.daemon_dead.add(nid)
        self.stats["daemon_deaths"] += 1
        sim.log(f"fault: nodeosd of n{nid} dies (its kernel serves on)")
        sim._at(sim.now + KTICK_MS, FO_PLANE, ("ktick", (nid, n.incarnation)))
        sim._at(sim.now + self.rng.randint(1200, 3500), RESTART, nid)

    def _cut_replica(
        self, sim: FailoverSimulation, rng: random.Random | None = None, span: tuple[int, int] = LONG_MS
    ) -> None:
        """A replica's node cut off from every other node (not the host) for long: the
        primaries' legs to it block until the leg watch may cut them (the map calls it down or
        drops it from in_sync), and it is copied again after the heal. A blip (its own `rng`)
        has no second failure."""
        blip = rng is not None
        rng = rng or self.rng
        st = sim._latest_map()
        lead = sim.leader()
        prims = {v["primary"] for v in st["volumes"].values()}
        # Rather a node that is no primary and not the leader (a new leader starts every lease
        # afresh): the point is the legs to it; a primary of another volume cut off fails over.
        nodes = [n for n in sorted(sim.nodes) if lead is None or n != lead.id] or sorted(sim.nodes)
        nid = rng.choice([n for n in nodes if n not in prims] or nodes)
        rest = [n for n in sorted(sim.nodes) if n != nid]
        before = set(sim.net.blocked)
        sim.net.partition([nid], rest)
        until = sim.now + rng.randint(*span)
        sim.long_cuts.append(LongCut(until, sim.net.blocked - before, set()))
        self.stats["replica_blips" if blip else "replica_cuts"] += 1
        sim.log(f"fault: replica n{nid} cut off from the other nodes{' (a blip)' if blip else ''}")
        sim._at(until, FO_UNCUT, None)
        if blip:
            return
        mates = sorted(
            {v["primary"] for v in st["volumes"].values() if any(s["node"] == nid for s in v["placement"])}
            - {nid}
        )
        if mates and self.rng.random() < 0.5:
            # A second failure while the first is out of sync: its volume's primary dies too,
            # once the map dropped the cut replica. Only a replica in sync may take over.
            at = sim.now + self.rng.randint(1500, 2500)
            sim._at(at, FO_PLANE, ("die", self.rng.choice(mates)))

    # --- checks ---
    def closed(self, uuid: str, st: dict[str, Any]) -> bool:
        vol = st["volumes"].get(uuid)
        return vol is None or vol["state"] == "deleting"

    def _where(self, sim: FailoverSimulation, uuid: str) -> list[str]:
        out = []
        for nid in sorted(sim.nodes):
            k = self.kernels.get(nid)
            up = sim.nodes[nid].up or nid in self.daemon_dead
            what = [
                w
                for w, has in (
                    ("record", uuid in self.records[nid]),
                    ("mirror", up and k is not None and uuid in k.mirrors),
                    ("export", up and k is not None and uuid in k.accept),
                    ("blocks", (uuid, nid) in sim.dp.blocks),
                )
                if has
            ]
            if what:
                out.append(f"n{nid}: {', '.join(what)}")
        return out

    def _check(self, sim: FailoverSimulation) -> None:
        st = sim._latest_map()
        for uuid in self.doomed:
            vol = st["volumes"].get(uuid)
            if vol is not None and vol["state"] == "deleting":
                self.deleted_at.setdefault(uuid, sim.now)
            if vol is not None and vol["state"] != "deleting":
                w = [n for n, a in sim.agents.items() if sim.nodes[n].up and a.writable(uuid)]
                if len(w) > 1:
                    raise Violation("two writable primaries", f"volume {uuid[-4:]}: nodes {w}")
            if uuid not in self.deleted_at or sim.settled_at is None:
                continue
            start = max(self.deleted_at[uuid], sim.settled_at)
            left = self._where(sim, uuid)
            if vol is None and not left:
                if uuid not in self.done:
                    self.done.add(uuid)
                    self.stats["teardowns_done"] += 1
                    sim.log(
                        f"teardown of {uuid[-4:]} done {sim.now - self.deleted_at[uuid]} ms after its delete"
                    )
                continue
            if sim.now - start > TEARDOWN_BOUND_S * 1000:
                raise Violation(
                    "teardown hung",
                    f"volume {uuid[-4:]} deleted at {self.deleted_at[uuid]} ms, still "
                    f"{'in the map, ' if vol is not None else ''}{'; '.join(left) or 'nowhere else'} "
                    f"{sim.now - start} ms after the heal or delete (bound {TEARDOWN_BOUND_S:.0f} s)",
                )

    def unhealthy(self, sim: FailoverSimulation) -> list[str]:
        st = sim._latest_map()
        out = []
        for uuid in self.doomed:
            left = self._where(sim, uuid)
            if uuid in st["volumes"] or left:
                out.append(f"deleted volume {uuid[-4:]} not torn down: {'; '.join(left) or 'in the map'}")
        return out

    def final_check(self, sim: FailoverSimulation) -> None:
        self._check(sim)
        st = sim._latest_map()
        for uuid in self.doomed:
            left = self._where(sim, uuid)
            if uuid not in st["volumes"] and left:
                raise Violation("left behind", f"volume {uuid[-4:]} left the map; still {'; '.join(left)}")
        sim.stats.update(self.stats)
