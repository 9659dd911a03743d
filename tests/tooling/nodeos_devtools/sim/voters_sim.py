"""The voters workload (`SimConfig.workload = "voters"`): many members, few voters, the voter
set kept by the leader with the daemon's own code (nodeos/cluster/voter_keeper.py and
voters.py), under crashes, partitions and whole racks lost.

Members 1..N sit on `racks` racks in blocks (members 1..N/racks on rack r0, and so on, as
servers are numbered rack by rack). The cluster starts as the daemon's does after its members
joined: member 1 the only voter, every other member a learner; the leader grows the set. Every
SHELL_MS of virtual time the leader's shell runs the keeper on its Raft status and proposes the
one change (or leadership transfer) it asks for. Virtual time is scaled as the Raft timers are
(ticks of 10 ms, elections after 100-200 ms): a voter is lost after DOWN_AFTER_MS.

Phases: the Raft simulator's faults for `duration_ms` (partitions, crashes, one-way cuts,
leader transfers, lossy networks), its membership changes replaced by a voter or a whole rack
down for longer than the bound; then the heal (network healed, every member restarted);
then a disaster: the rack of a voter lost for good; then that rack returns.

Invariants, besides the Raft simulator's own (election safety, log matching, no acknowledged
command lost, linearizable reads...):
1. once the set reached its target, no member ever applies a configuration with fewer voters
   (a replacement comes in before the lost voter goes);
2. within HEAL_BOUND_MS after the heal: the set full, every voter up, no two on one rack;
3. within DISASTER_BOUND_MS after a rack is lost for good: the same, none on the lost rack;
4. no churn: the rack returning moves no vote (the set was spread), for RETURN_MS.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.raft import ConfChange, ConfChangeType, ProgressState, ProposalDropped, StateRole
from nodeos.cluster.raft.types import ConfState, HardState, Snapshot, SnapshotMeta
from nodeos.cluster.voter_keeper import VoterKeeper
from nodeos.cluster.voters import Policy

from .cluster import Simulation
from .config import SeedResult, SimConfig
from .events import RESTART, TICK
from .invariants import Violation
from .network import SimNetwork
from .node import SimNode
from .voters_broken import voters_bug

VOTER_TICK, VOTER_RESTART = 200, 201
SHELL_MS = 20  # the driver runs its keeper every tick; here every other tick
DOWN_AFTER_MS = 600  # three election timeouts, as 3 s is in the process test
HEAL_BOUND_MS = 5000
DISASTER_BOUND_MS = 3000
RETURN_MS = 1000


def voters_config(**kw: Any) -> SimConfig:
    """The voters workload's defaults: 2 s of faults, then up to 12 s for the phases after
    them. Elections after 200-400 ms and a heartbeat every 40 ms (the daemon's ratio is 10 to
    1, the other workloads' 5 to 1): a heartbeat round is 2n events, what a seed costs."""
    base = {
        "workload": "voters",
        "duration_ms": 2000,
        "settle_ms": 12000,
        "disrupt": False,
        "election_tick": 20,
        "heartbeat_tick": 4,
    }
    return SimConfig(**{**base, **kw})


@dataclass
class GroupNetwork(SimNetwork):
    """Partitions as groups (a member talks to its own group only): cutting 500 of 1,000
    members off costs 500 assignments, not 250,000 blocked links."""

    group: dict[int, int] | None = None
    next_group: int = 0

    def partition(self, side_a: list[int], side_b: list[int]) -> None:
        if self.group is None:
            self.group = {}
        self.next_group += 1
        for a in side_a:  # side_b is every other member here (faults.py): it keeps its group
            self.group[a] = self.next_group

    def heal(self) -> None:
        super().heal()
        self.group = None

    def can_pass(self, frm: int, to: int) -> bool:
        g = self.group
        return (frm, to) not in self.blocked and (g is None or g.get(frm, 0) == g.get(to, 0))

    def arrivals(self, now: int, frm: int, to: int) -> list[int]:
        g = self.group
        if g is not None and g.get(frm, 0) != g.get(to, 0):
            return []
        return super().arrivals(now, frm, to)


class VoterSimulation(Simulation):
    def __init__(self, seed: int, cfg: SimConfig) -> None:
        self.vrng = random.Random(seed * 7_000_003 + 29)
        n = cfg.nodes
        racks = max(1, min(n, cfg.racks or max(1, n // 25)))
        self.rack = {nid: f"r{(nid - 1) * racks // n}" for nid in range(1, n + 1)}
        self.policy = Policy(voters=cfg.voters, down_after_s=DOWN_AFTER_MS / 1000)
        self.target = min(cfg.voters, n)
        self.map0 = _members_map(n, self.rack)
        self.keeper = VoterKeeper()
        self.keeper_of: tuple[int, int, int] | None = None
        self.reached: dict[int, int] = {}  # member -> incarnation in which it saw the set full
        # Members a fault or phase keeps down -> which hold: a restart of an older hold, or the
        # Raft simulator's own, leaves them down.
        self.held_down: dict[int, int] = {}
        self.holds = 0
        self.phase, self.phase_at, self.lost_rack = "faults", 0, ""
        self.spread_at_return: tuple[int, ...] = ()
        self.snap_seen: tuple[tuple[int, int, int] | None, bool] = (None, False)
        super().__init__(seed, replace(cfg, disrupt=False))
        self.net = GroupNetwork(self.net.rng, self.net.faults)
        self.stats.update(promotions=0, demotions=0, transfers_by_keeper=0, racks_lost=0, voters_lost=0)
        self._at(SHELL_MS, VOTER_TICK, None)

    def run(self) -> SeedResult:
        with voters_bug(self.cfg.broken):
            return super().run()

    def _bootstrap(self, disk: Any, ids: list[int]) -> None:
        # As after every member joined: member 1 votes, the others are learners.
        cs = ConfState((1,), tuple(i for i in ids if i != 1))
        snap = Snapshot(SnapshotMeta(index=1, term=1, conf_state=cs), b"\x90")  # msgpack []
        disk.persist(HardState(term=1, vote=0, commit=1), [], snap)

    def _finished(self) -> bool:
        return self.phase == "done"

    # --- the leader's shell ---
    def _dispatch(self, kind: int, payload: Any) -> None:
        if kind == VOTER_TICK:
            self._voter_tick()
        elif kind == VOTER_RESTART:
            nid, hold = payload
            if self.held_down.get(nid) == hold:
                del self.held_down[nid]
                super()._dispatch(RESTART, nid)
        elif kind == RESTART and payload in self.held_down:
            return  # a restart drawn before a phase took the member down for longer
        else:
            super()._dispatch(kind, payload)

    def _voter_tick(self) -> None:
        self._at(self.now + SHELL_MS, VOTER_TICK, None)
        lead = self.leader()
        if lead is None or lead.rn is None:
            return
        r = lead.rn.raft
        if self.keeper_of != (lead.id, r.term, lead.incarnation):
            self.keeper = VoterKeeper()
            self.keeper.became_leader(self.now / 1000)
            self.keeper_of = (lead.id, r.term, lead.incarnation)
        self._catch_up(lead)
        cs = r.trk.conf_state()
        self._phase_step(cs)
        if lead.rn is None:
            return  # the phase took the leader's rack down
        plan = self.keeper.tick(lead.rn.status(), cs, self.map0.nodes, self.policy, self.now / 1000)
        ch = plan.change
        if ch is None:
            return
        if ch.kind == "transfer":
            if r.lead_transferee == 0:
                self.log(f"keeper: transfer n{lead.id} -> n{ch.node_id}: {ch.reason}")
                self.stats["transfers_by_keeper"] += 1
                lead.rn.transfer_leadership(ch.node_id)
                self._after_input(lead)
            return
        cc = ConfChangeType.ADD_VOTER if ch.kind == "promote" else ConfChangeType.ADD_LEARNER
        try:
            lead.rn.propose_conf_change(ConfChange(cc, ch.node_id))
        except ProposalDropped:
            return
        self.log(f"keeper at n{lead.id}: {ch.kind} n{ch.node_id} ({self.rack[ch.node_id]}): {ch.reason}")
        self.stats["promotions" if ch.kind == "promote" else "demotions"] += 1
        self._after_input(lead)

    def _sync(self, n: SimNode) -> None:
        super()._sync(n)
        # Invariant 1, on every member's applied configuration (the leader applies each change
        # before the next is proposed, so a shrink shows there at least).
        voters = len(n.conf_state.voters)
        if voters >= self.target:
            self.reached[n.id] = n.incarnation
        elif self.reached.get(n.id) == n.incarnation and n.conf_state.voters:
            raise Violation(
                "voter set shrank",
                f"n{n.id} applied a configuration of {voters} voters {list(n.conf_state.voters)} "
                f"after the set had reached {self.target}",
            )

    def _schedule_wake(self, n: SimNode) -> None:
        """TicksMixin's, but a leader looks for peers in snapshot state (whose retry counters
        move every tick) at most once per virtual ms: once per input, with a thousand peers,
        made every heartbeat round O(n^2). A snapshot state entered within that ms is seen at
        the leader's next input or wake-up (its retry may come a tick late)."""
        cur, nxt = self.wake_at[n.id], self.next_tick[n.id]
        if n.rn is None or (cur is not None and cur <= nxt):
            return
        r = n.rn.raft
        if r.state is StateRole.LEADER:
            rc = r.cfg
            k = min(rc.heartbeat_tick - r.heartbeat_elapsed, rc.election_tick - r.election_elapsed)
            if k > 1 and rc.snapshot_retry_ticks:
                key = (n.id, n.incarnation, self.now)
                if self.snap_seen[0] != key:
                    states = (pr.state for pr in r.trk.progress.values())
                    self.snap_seen = (key, any(st is ProgressState.SNAPSHOT for st in states))
                if self.snap_seen[1]:
                    k = 1
        elif r.promotable():
            k = r.randomized_election_timeout - r.election_elapsed
        else:
            return
        wake = nxt + (max(k, 1) - 1) * self.cfg.tick_ms
        if cur is None or wake < cur:
            self.wake_at[n.id] = wake
            self._at(wake, TICK, (n.id, n.incarnation, wake))

    # --- faults: a voter or a whole rack down for longer than the bound ---
    def _fault(self, x: float) -> None:
        if not 0.55 <= x < 0.75:
            super()._fault(x)  # partitions, crashes, one-way cuts, transfers, network quality
            return
        lead = self.leader()
        r = self.vrng
        if x < 0.62:
            rack = (
                self.rack[r.choice(list(lead.rn.raft.trk.voters))]
                if lead and lead.rn
                else r.choice(sorted(set(self.rack.values())))
            )
            self.stats["racks_lost"] += 1
            self._down_for(
                [nid for nid, rk in self.rack.items() if rk == rack], r.randint(400, 1500), f"rack {rack}"
            )
        elif lead is not None and lead.rn is not None:
            victim = r.choice(sorted(lead.rn.raft.trk.voters))
            self.stats["voters_lost"] += 1
            self._down_for([victim], r.randint(400, 1500), "voter")

    def _down_for(self, ids: list[int], ms: int, what: str) -> None:
        self.holds += 1
        for nid in ids:
            n = self.nodes[nid]
            if n.up:
                n.crash()
                self.stats["crashes"] += 1
            self.held_down[nid] = self.holds
            if ms:
                self._at(self.now + ms, VOTER_RESTART, (nid, self.holds))
        self.log(f"{what} down for {ms or 'good'} ms: {ids[:10]}{' ...' if len(ids) > 10 else ''}")

    # --- the phases after the faults ---
    def _settle(self) -> None:
        for nid, hold in sorted(self.held_down.items()):
            self._at(self.now, VOTER_RESTART, (nid, hold))  # every member back, as the heal promises
        super()._settle()
        self.phase, self.phase_at = "heal", self.now

    def _spread(self, cs: ConfState, avoid: str = "") -> str | None:
        """Why the set is not whole and spread yet (None: it is)."""
        vs = list(cs.voters)
        if len(vs) != self.target:
            return f"{len(vs)} voters {vs}, {self.target} wanted"
        down = [v for v in vs if not self.nodes[v].up]
        if down:
            return f"voters {down} are down"
        racks = [self.rack[v] for v in vs]
        if len(set(racks)) < len(racks):
            return f"voters {vs} share racks {racks}"
        if avoid in racks:
            return f"a voter is on the lost rack {avoid}"
        return None

    def _phase_step(self, cs: ConfState) -> None:
        if self.phase in ("faults", "done"):
            return
        elapsed = self.now - self.phase_at
        if self.phase == "heal":
            why = self._spread(cs)
            if why is None:
                self.stats["heal_ms"] = elapsed
                self._disaster(cs)
            elif elapsed > HEAL_BOUND_MS:
                raise Violation("voter set not whole", f"{HEAL_BOUND_MS} ms after the heal: {why}")
        elif self.phase == "disaster":
            why = self._spread(cs, self.lost_rack)
            if why is None:
                self.stats["rack_heal_ms"] = elapsed
                for nid, hold in sorted(self.held_down.items()):
                    self._at(self.now, VOTER_RESTART, (nid, hold))
                self.phase, self.phase_at, self.spread_at_return = "return", self.now, cs.voters
                self.log(f"rack {self.lost_rack} returns")
            elif elapsed > DISASTER_BOUND_MS:
                raise Violation(
                    "voter set not healed",
                    f"{DISASTER_BOUND_MS} ms after rack {self.lost_rack} was lost: {why}",
                )
        elif self.phase == "return" and elapsed >= RETURN_MS:
            if cs.voters != self.spread_at_return:
                raise Violation(
                    "churn",
                    f"rack {self.lost_rack} returned to a spread voter set {list(self.spread_at_return)}: "
                    f"now {list(cs.voters)}",
                )
            self.phase = "done"

    def _disaster(self, cs: ConfState) -> None:
        """A voter's rack lost for good: half the time the leader's own."""
        lead = self.leader()
        pick = lead.id if lead is not None and self.vrng.random() < 0.5 else self.vrng.choice(list(cs.voters))
        self.lost_rack = self.rack[pick]
        self.phase, self.phase_at = "disaster", self.now
        self._down_for(
            [nid for nid, rk in self.rack.items() if rk == self.lost_rack], 0, f"rack {self.lost_rack}"
        )


def _members_map(n: int, rack: dict[int, str]) -> ClusterMap:
    """The members as the map holds them, made by the real commands (names and rack labels)."""
    m = ClusterMap()
    cmds = [("init_cluster", {"cluster_id": "sim-voters"})]
    for nid in range(1, n + 1):
        cmds.append(
            (
                "add_node",
                {
                    "node_id": nid,
                    "name": f"n{nid}",
                    "addresses": {"peer": f"10.0.{nid // 250}.{nid % 250}:7100"},
                },
            )
        )
        cmds.append(("node_label", {"node_id": nid, "set": {"rack": rack[nid]}}))
    for i, (cmd, args) in enumerate(cmds, start=1):
        out = m.apply(i, encode_command(cmd, args))
        if "error" in out:
            raise RuntimeError(f"setup {cmd}: {out['error']}")
    return m
