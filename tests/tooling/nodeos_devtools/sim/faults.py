"""The simulator's fault schedule: partitions, one-way link loss, crashes, membership
changes, leadership transfers and network quality changes, drawn from the seed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeos.cluster.raft import ConfChange, ConfChangeType, ProposalDropped

from .events import FAULT, HEAL, RESTART
from .node import SimNode

if TYPE_CHECKING:
    from .cluster import Simulation


class FaultsMixin:
    # --- faults ---
    def _schedule_faults(self: Simulation) -> None:
        t = 0
        r = self.rng
        while True:
            t += r.randint(*self.fault_gap)
            if t >= self.cfg.duration_ms:
                break
            self._at(t, FAULT, r.random())

    def _fault(self: Simulation, x: float) -> None:
        r = self.rng
        ids = sorted(self.nodes)
        lead = self.leader()
        if x < 0.25:
            # partition: a random split, or the leader alone; healed later
            if lead is not None and r.random() < 0.5:
                side = [lead.id]
            else:
                side = r.sample(ids, r.randint(1, max(1, len(ids) // 2)))
            other = [i for i in ids if i not in side]
            self.net.partition(side, other)
            self.log(f"partition {side} | {other}")
            self._at(self.now + r.randint(50, 600), HEAL, None)
        elif x < 0.45:
            up = [n for n in self.nodes.values() if n.up]
            if not up:
                return
            victim = lead if lead is not None and r.random() < 0.5 else r.choice(up)
            self._crash(victim)
        elif x < 0.55:
            if len(ids) < 2:
                return
            a, b = r.sample(ids, 2)
            self.net.blocked.add((a, b))  # one-way link loss
            self.log(f"link {a}->{b} cut")
            self._at(self.now + r.randint(50, 400), HEAL, None)
        elif x < 0.75:
            self._conf_change(lead)
        elif x < 0.85:
            if lead is not None:
                voters = [v for v in lead.rn.raft.trk.voters if v != lead.id]  # type: ignore[union-attr]
                if voters:
                    to = r.choice(sorted(voters))
                    self.log(f"transfer leadership n{lead.id} -> n{to}")
                    self.stats["transfers"] += 1
                    self._catch_up(lead)
                    lead.rn.transfer_leadership(to)  # type: ignore[union-attr]
                    self._after_input(lead)
        else:
            f = self.net.faults
            f.drop = r.choice([0.0, 0.02, 0.1, 0.3])
            f.duplicate = r.choice([0.0, 0.05])
            self.log(f"network drop={f.drop} duplicate={f.duplicate}")

    def _crash(self: Simulation, victim: SimNode) -> None:
        victim.crash()
        self.stats["crashes"] += 1
        self.log(f"n{victim.id} crashes (unsynced writes lost)")
        self._at(self.now + self.rng.randint(10, 400), RESTART, victim.id)

    def _conf_change(self: Simulation, lead: SimNode | None) -> None:
        if lead is None or lead.rn is None:
            return
        r = self.rng
        cs = lead.rn.raft.conf_state()
        members = set(cs.voters) | set(cs.learners)
        missing = [i for i in sorted(self.nodes) if i not in members]
        options: list[ConfChange] = []
        if missing:
            options.append(ConfChange(ConfChangeType.ADD_LEARNER, r.choice(missing)))
        if cs.learners:
            options.append(ConfChange(ConfChangeType.ADD_VOTER, r.choice(list(cs.learners))))
        if len(cs.voters) > 2:
            options.append(ConfChange(ConfChangeType.REMOVE, r.choice(list(cs.voters))))
        if len(cs.voters) > 3:
            options.append(ConfChange(ConfChangeType.ADD_LEARNER, r.choice(list(cs.voters))))
        if not options:
            return
        cc = r.choice(options)
        self._catch_up(lead)
        try:
            lead.rn.propose_conf_change(cc)
            self.log(f"n{lead.id} proposes {cc.type.name} n{cc.node_id}")
            self.stats["conf_changes"] += 1
        except ProposalDropped:
            return
        self._after_input(lead)
