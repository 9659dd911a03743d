"""A deleted volume's teardown on one simulated node, in the order the product's plan allows.

The plan's rule is the product's (nodeos/agent/plan.py `waits_for_primary`): a secondary keeps
its replica export while the primary's report still holds the volume and the primary is up,
and removes it anyway once it waited past the agent's bound (nodeos/agent/agent.py
TEARDOWN_WAIT_S, at the simulator's scale). The primary's delete (nodeos/node/mirror_ops.py
`teardown`): its front end goes, every leg of its mirror is cut in one round with each leg's
loss bounded first (`cut_mirror_legs`), md stops once nothing is in flight, its LV goes. Each
node runs its own steps whenever its agent gets to them: any order the plan allows. A step
interrupted by a restart runs again from the node's record (its intent).

`waits_for_primary` and `cut_legs` are module names on purpose: a test patches the old order in
(tests/sim/test_sim_faithful.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodeos.agent.agent import TEARDOWN_WAIT_S
from nodeos.agent.plan import waits_for_primary

from .sim_legs import SCALE
from .sim_md import Mirror

if TYPE_CHECKING:
    from .failover_agent import SimFailoverAgent
    from .failover_sim import FailoverSimulation

__all__ = ["TEARDOWN_WAIT", "cut_legs", "step", "waits_for_primary", "waits_why"]
TEARDOWN_WAIT = TEARDOWN_WAIT_S * SCALE  # the agent's bound on a replica's wait, in the sim


def cut_legs(m: Mirror, legs: list[int], now: float) -> bool:
    """The primary's cut (cut_mirror_legs): all legs in one round, each one's loss bounded
    first. True once no leg is left."""
    m.cut(legs, now)
    return True


def waits_why(agent: SimFailoverAgent, sim: FailoverSimulation, st: dict[str, Any], uuid: str) -> str | None:
    rec = sim.plane.records[agent.nid].get(uuid)
    if rec is None or rec["state"] == "deleting":
        return None
    return waits_for_primary(st, rec, agent.nid)


def step(agent: SimFailoverAgent, sim: FailoverSimulation, st: dict[str, Any], now: float) -> None:
    """The delete steps the plan gives this node now, and the ones under way."""
    me = agent.nid
    recs = sim.plane.records[me]
    for uuid, rec in sorted(recs.items()):
        vol = st["volumes"].get(uuid)
        if rec["state"] != "deleting":
            if vol is not None and vol["state"] != "deleting":
                continue
            why = waits_for_primary(st, rec, me)
            if why is not None:
                since = agent.waits.setdefault(uuid, now)
                if now - since <= TEARDOWN_WAIT:
                    continue
                sim.log(f"n{me} agent: {uuid[-2:]}: {why} for {TEARDOWN_WAIT:.0f} s; removing anyway")
            rec["state"] = "deleting"  # the intent, durable: a restart goes on from here
            agent.waits.pop(uuid, None)
            sim.log(f"n{me} agent: delete of {uuid[-2:]} begins ({rec['role']})")
        if _delete(agent, sim, uuid, now):
            del recs[uuid]
            sim.log(f"n{me} agent: delete of {uuid[-2:]} done")


def _delete(agent: SimFailoverAgent, sim: FailoverSimulation, uuid: str, now: float) -> bool:
    """One pass of the node's delete of `uuid`; True once nothing of it is left here."""
    k = agent.kernel(sim)
    me = agent.nid
    m = k.mirrors.get(uuid)
    if m is not None:
        m.closing, m.front_open, m.frozen = True, False, False  # the front end goes first
        legs = sorted(n for n, leg in m.legs.items() if leg.ctrl is not None)
        if legs and not cut_legs(m, legs, now):
            return False  # md wedged on a superblock write: the step waits
        m.write_superblock(now)
        if not m.idle():
            return False  # md's stop waits for what is in flight
        m.stopped = True
        k.fail_all(sim, uuid, m)  # nothing is left in flight; a write md held ends with it
        del k.mirrors[uuid]
    k.accept.pop(uuid, None)  # the replica export
    k.conn.pop(uuid, None)
    sim.dp.blocks.pop((uuid, me), None)  # the LV
    return True
