"""The planned move (drain) on the simulated old primary's side, as nodeos/agent/handoff.py does it.

When the map asks this node to hand over a volume it is primary of (`handoff` at the volume's
epoch, which is also its mirror's), the node stops taking the host's writes for it (the front
end turns ANA inaccessible: a write is refused and the host tries its next path), waits until
its mirror holds no write in flight (md's freeze and thaw drain them), and only then reports
`handed_off: epoch`; the leader fails the volume over on that word. A hand-over the map
withdraws (the node undrained) before the failover lets it serve again. The rest of the agent:
failover_agent.py (this subclass only adds the hand-over).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .failover_agent import Mirror, SimFailoverAgent
from .node import SimNode

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation


class HandoffAgent(SimFailoverAgent):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.handing: dict[str, int] = {}  # uuid -> epoch whose front end is fenced for a hand-over
        self.handed: dict[str, int] = {}  # uuid -> epoch the report confirms (writes drained)

    def writable(self, uuid: str) -> bool:
        return super().writable(uuid) and uuid not in self.handing

    def tick(self, sim: FailoverSimulation, n: SimNode, now: float) -> None:
        assert n.cmap is not None
        self._hand_over(sim, n.cmap.state)
        super().tick(sim, n, now)

    def _hand_over(self, sim: FailoverSimulation, st: dict[str, Any]) -> None:
        for uuid in sorted(set(self.handing) | set(self.mirrors)):
            m, vol = self.mirrors.get(uuid), st["volumes"].get(uuid)
            ho = (vol or {}).get("handoff") or {}
            if (
                m is not None
                and vol is not None
                and vol["primary"] == self.nid
                and ho.get("epoch") == vol["epoch"] == m.epoch
            ):
                if uuid not in self.handing:
                    sim.stats["handoffs"] += 1
                    sim.log(f"n{self.nid} agent: hands {uuid[-2:]} over at epoch {m.epoch}: front end fenced")
                self.handing[uuid] = m.epoch
                if not m.pending:  # what md held has drained: the report may say so
                    self.handed[uuid] = m.epoch
            elif uuid in self.handing:
                # Withdrawn (undrained), or moved on: a new epoch is a new mirror, and a
                # failover that went through demotes it (the base agent's _follow).
                sim.log(f"n{self.nid} agent: hand-over of {uuid[-2:]} withdrawn or done")
                self.handing.pop(uuid, None)
                self.handed.pop(uuid, None)

    def report_extra(self, uuid: str, m: Mirror) -> dict[str, Any]:
        if self.handed.get(uuid) == m.epoch:
            return {"handed_off": m.epoch}
        return {}

    def on_message(
        self, sim: FailoverSimulation, n: SimNode, kind: str, frm: int, body: dict[str, Any]
    ) -> None:
        if kind == "write" and body.get("vol") in self.handing:
            sim.fo_send("w_no", self.nid, frm, {"vol": body["vol"], "attempt": body["attempt"]})
            return
        super().on_message(sim, n, kind, frm, body)
