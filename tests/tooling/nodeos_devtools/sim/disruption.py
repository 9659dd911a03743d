"""The disruption phase: after the faults stopped and the final command committed, a
minority of voters is cut off, then let back in (pre-vote and check-quorum, thesis 9.6).

Liveness invariants checked after every event of the phase:
- an isolated node's term stays put (a pre-candidate never bumps its real term, and a
  voter never adopts the term of a pre-vote);
- the healthy leader is not deposed: it stays leader of the same term, and no node
  reaches a higher term, while the minority is away and after it comes back;
- at the end every isolated node has rejoined the leader's term.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodeos.cluster.raft import StateRole

from .events import DONE, REJOIN
from .invariants import Violation

if TYPE_CHECKING:
    from .cluster import Simulation


@dataclass
class Disruption:
    leader: int
    term: int
    isolated: dict[int, int] = field(default_factory=dict)  # node -> its term when cut off
    rejoined: bool = False


class DisruptionMixin:
    disruption: Disruption | None

    def _start_disruption(self: Simulation) -> bool:
        """Cut a minority of voters off the healthy leader; False when there is none to cut."""
        lead = self.leader()
        if lead is None or lead.rn is None:
            return False
        r = lead.rn.raft
        if r.lead_transferee or r.pending_conf_index > r.log.applied:
            return False  # a transfer or membership change in flight may move leadership legitimately
        followers = sorted(v for v in r.trk.voters if v != lead.id)
        k = len(followers) // 2  # the largest minority of the voters, the leader kept out
        if k == 0:
            return False
        cut = self.rng.sample(followers, k)
        if any(not self.nodes[i].up for i in cut):
            return False
        rest = [i for i in self.nodes if i not in cut]
        self.net.partition(cut, rest)
        self.disruption = Disruption(
            lead.id,
            r.term,
            {i: self.nodes[i].rn.raft.term for i in cut},  # type: ignore[union-attr]
        )
        self.stats["disruptions"] = self.stats.get("disruptions", 0) + 1
        self.log(f"disruption: {cut} cut off from leader n{lead.id} (term {r.term})")
        timeout_ms = self.cfg.election_tick * self.cfg.tick_ms
        self._at(self.now + 4 * timeout_ms, REJOIN, None)  # several campaigns of the isolated nodes
        self._at(self.now + 7 * timeout_ms, DONE, None)
        return True

    def _rejoin(self: Simulation) -> None:
        assert self.disruption is not None
        self.net.heal()
        self.disruption.rejoined = True
        self.log("disruption: minority let back in")

    def _check_disruption(self: Simulation, final: bool = False) -> None:
        d = self.disruption
        if d is None:
            return
        lead = self.nodes[d.leader]
        if not lead.up or lead.rn is None or lead.rn.raft.state is not StateRole.LEADER:
            raise Violation("disruption", f"healthy leader n{d.leader} of term {d.term} was deposed")
        for nid, n in self.nodes.items():
            if n.rn is None:
                continue
            term = n.rn.raft.term
            if term > d.term:
                raise Violation(
                    "disruption", f"n{nid} reached term {term} under leader n{d.leader} (term {d.term})"
                )
            if not d.rejoined and nid in d.isolated and term != d.isolated[nid]:
                raise Violation("disruption", f"isolated n{nid} moved from term {d.isolated[nid]} to {term}")
            if final and nid in d.isolated and term != d.term:
                raise Violation("liveness", f"n{nid} did not rejoin term {d.term} after the partition healed")
