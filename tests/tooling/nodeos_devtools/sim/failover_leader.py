"""The failover workload's simulated leader shell: nodeos/control/failover_loop.py on one simulated
node. Lease grants after a Raft read barrier (the real ReadIndex), and the real controller
(nodeos/storage/failover.py `decide`) on the leader's clock, its commands proposed one at a time
(`propose`, framed as the driver frames it). The node agents: failover_agent.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeos.cluster import leader_contact
from nodeos.cluster.map import encode_current
from nodeos.cluster.raft import ProposalDropped, StateRole
from nodeos.storage import failover
from nodeos.storage.lookup import health_of

from .node import PendingRead, SimNode

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation

CONTROLLER_EVERY_S = 0.1  # failover_loop.TICK_S
PROPOSE_TIMEOUT_S = 5.0
CONTACT_ASK_S = 0.5  # failover_loop.FLOOR_ASK_S: voters not answered are asked again


class SimLeaderShell:
    """nodeos/control/failover_loop.py on one simulated node."""

    def __init__(self, timing: failover.LeaseTiming) -> None:
        self.timing = timing
        self.leases: failover.Leases | None = None
        self.term: int | None = None
        self.queue: list[bytes] = []
        self.pending: tuple[bytes, float] | None = None
        self.barriers: dict[bytes, tuple[int, int]] = {}
        self.last_tick = -1e9
        self.contact: dict[int, float] = {}  # voter -> its last moment with an older leader
        self.asked = -1e9

    def leading(self, n: SimNode, now: float) -> failover.Leases | None:
        r = n.rn.raft if n.rn is not None else None
        if r is None or r.state is not StateRole.LEADER:
            self.leases, self.term = None, None
            return None
        if self.leases is None or self.term != r.term:
            self.leases, self.term = failover.Leases(leader_since=now), r.term
            self.contact, self.asked = {}, -1e9
        return self.leases

    def ask_contact(self, sim: FailoverSimulation, n: SimNode, now: float) -> None:
        """failover_loop._ask_floor: every voter that has not answered, again every ask's timeout."""
        if self.leases is None or self.leases.floor is not None or now - self.asked < CONTACT_ASK_S:
            return
        self.asked = now
        for v in n.conf_state.voters:
            if v not in self.contact:
                sim.fo_send("contact", n.id, v, {"term": self.term})

    def contact_answer(self, sim: FailoverSimulation, n: SimNode, frm: int, body: dict[str, float]) -> None:
        now = sim.clock(n.id)
        leases = self.leading(n, now)
        if leases is None or body["term"] != self.term or leases.floor is not None:
            return
        self.contact[frm] = now - body["ago"]  # counted back from the answer's arrival
        leases.floor = leader_contact.lease_floor(self.contact, n.conf_state.voters)
        if leases.floor is not None:
            sim.stats["lease_floors"] += 1

    def lease_request(self, sim: FailoverSimulation, n: SimNode, frm: int, req: int) -> None:
        assert n.rn is not None
        if n.rn.raft.state is not StateRole.LEADER:
            sim.fo_send("lease_no", n.id, frm, {"req": req})
            return
        sim.next_ctx += 1
        ctx = b"L%d" % sim.next_ctx
        self.barriers[ctx] = (frm, req)
        n.reads[ctx] = PendingRead(ctx, len(sim.check.acked))
        sim._catch_up(n)
        try:
            n.rn.read_index(ctx)  # the read barrier
        except ProposalDropped:  # stepped down in the ticks just caught up (as the driver's
            del self.barriers[ctx], n.reads[ctx]  # role, seen before its last tick)
            sim.fo_send("lease_no", n.id, frm, {"req": req})
        sim._after_input(n)

    def barrier_done(self, sim: FailoverSimulation, n: SimNode, ctx: bytes) -> None:
        frm, req = self.barriers.pop(ctx)
        now = sim.clock(n.id)
        leases = self.leading(n, now)
        if leases is None:
            sim.fo_send("lease_no", n.id, frm, {"req": req})
            return
        leases.renewed(frm, now, self.timing)
        sim.stats["lease_grants"] += 1
        assert n.cmap is not None
        st = n.cmap.state
        body = {"req": req, "health": health_of(st, frm), "index": st["applied_index"]}
        sim.fo_send("lease_ok", n.id, frm, body)

    def tick(self, sim: FailoverSimulation, n: SimNode, now: float) -> None:
        if self.leading(n, now) is not None:
            self.ask_contact(sim, n, now)
        if now - self.last_tick < CONTROLLER_EVERY_S:
            return
        self.last_tick = now
        leases = self.leading(n, now)
        if leases is None:
            self.queue, self.pending = [], None
            return
        assert n.rn is not None
        leases.heard(failover.in_contact_now(n.rn.raft.trk.progress, n.id), now)
        if self.pending is not None:
            if self.pending[0] in n.state_set:
                # decided on again in this tick, as failover_loop.tick does after a health change
                self.pending = None
            elif now > self.pending[1]:
                self.queue, self.pending = [], None
                return
            else:
                return
        if not self.queue:
            assert n.cmap is not None
            cmds = failover.decide(n.cmap.state, leases, now, self.timing)
            # Re-placement is not modelled (the agents keep a volume's nodes for good), and a
            # drain (failover_faults.py) would re-place a drained node's secondaries at once.
            cmds = [c for c in cmds if c[0] != "volume_replace_replica"]
            st = n.cmap.state
            self.queue = [
                encode_current(st, c, {**a, "at": now} if c == "record_event" else a) for c, a in cmds
            ]
            sim.stats["suspects"] += sum(1 for c, _ in cmds if c == "record_event")
            held = [a for c, a in cmds if c == "record_event" and "not called down" in a["message"]]
            sim.stats["holds"] += len(held)
        if self.queue:
            cmd = self.queue.pop(0)
            data = sim.fo_propose(n, cmd)
            if data is None:
                self.queue = []
            else:
                self.pending = (data, now + PROPOSE_TIMEOUT_S)


def propose(sim: FailoverSimulation, n: SimNode, cmd: bytes) -> bytes | None:
    """Propose a map command at `n` framed as the driver frames it; None when dropped."""
    import msgpack

    assert n.rn is not None
    sim.next_ctx += 1
    data: bytes = msgpack.packb([b"f%d" % sim.next_ctx, cmd], use_bin_type=True)
    sim._catch_up(n)
    try:
        n.rn.propose(data)
    except ProposalDropped:
        return None
    sim.proposer[data] = (n.id, n.incarnation)
    sim._after_input(n)
    return data
