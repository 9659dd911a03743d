"""The failover workload's own faults (failover_sim.py calls these), on top of the Raft simulator's.

- **long cuts**: a primary (or the leader with a primary) cut off from the cluster, from
  everyone (the host too) or from the cluster network only, for 1.2-3.5 s. They last their whole
  time: the Raft simulator's short partitions heal the whole network when they end, which used
  to end a long cut after a few hundred ms too (about one failover in eight seeds), so a heal
  puts the long cuts still due back in place;
- **long crashes**: a primary down for 1.2-3.5 s;
- **drains**: an operator drains a primary's node (`node_set_state draining`, through the
  leader) and undrains it 0.3-2.5 s later: the controller hands the node's primaries over
  (`volume_handoff`, the agent's `handed_off`, then a planned `volume_failover`), or the undrain
  withdraws a hand-over in flight. Every node is undrained once the faults stop;
- **a starved node** (the "starved" mix only, issue 29): one node is powered off for long and
  a primary of a volume it shares is starved meanwhile: the lease messages of that primary
  (its requests, the leader's answers) are lost or late (up to 1.2 s) for 3-6 s while its Raft
  member answers as ever. The leader finds it suspect; past the grace it keeps it up while it
  holds the only in-sync replica of its volumes, and the node keeps those unfenced;
- **late reports**: per seed, up to 20 % of the agents' reports are proposed a second time
  0.3-2.5 s later, through whichever node leads then (a report proposal stuck in a queue, or
  an entry of an old leader's term committed late): the map must ignore it (seq) or, where it
  is the newest, take it only for what it says at its epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodeos.cluster.map import encode_command

from .events import RESTART
from .failover_data import HOST
from .failover_leader import propose

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation

FO_UNCUT, FO_DRAIN, FO_REPLAY = 103, 104, 105
DRAIN_RETRY_MS = 200
UNDRAIN_EVERY_MS = 300
# A lease (1 s) runs out and the leader calls a node down 1.3 s after its last renewal: most
# long faults must outlast that, and one that began under another leader its fresh table too.
LONG_MS = (1200, 3500)
STARVED_KINDS = ("lease", "lease_ok", "lease_no")
STARVED_LOSS = 0.75


@dataclass
class LongCut:
    until: int  # virtual ms
    blocked: set[tuple[int, int]]
    storage_ok: set[tuple[int, int]]


def reapply_cuts(sim: FailoverSimulation) -> None:
    """After a heal: the long cuts still due are back in place."""
    sim.long_cuts = [c for c in sim.long_cuts if c.until > sim.now]
    for c in sim.long_cuts:
        sim.net.blocked |= c.blocked
        sim.storage_ok |= c.storage_ok


def uncut(sim: FailoverSimulation) -> None:
    sim.net.heal()
    sim.storage_ok.clear()
    sim.log("failover fault: a long cut ends (network healed)")
    reapply_cuts(sim)


def starved(sim: FailoverSimulation, kind: str, frm: int, to: int, times: list[int]) -> list[int]:
    """A starved node's lease messages: most lost, the others late."""
    if kind not in STARVED_KINDS:
        return times
    nid = frm if kind == "lease" else to
    if sim.now >= sim.starving.get(nid, 0):
        return times
    r = sim.frng
    return [t + r.randint(100, 1200) for t in times if r.random() >= STARVED_LOSS]


def starve_fault(sim: FailoverSimulation) -> None:
    """Power one node off for long and starve a primary of a volume it shares (issue 29's lab)."""
    r = sim.frng
    st = sim._latest_map()
    pairs = [
        (st["volumes"][u]["primary"], s["node"])
        for u in sim.vols
        for s in st["volumes"][u]["placement"]
        if s["node"] != st["volumes"][u]["primary"]
    ]
    lead = sim.leader()
    # A leader's lease messages to itself are never late, and a leader powered off makes the next
    # one count every lease afresh: neither where another pair fits.
    pairs = [p for p in pairs if lead is None or lead.id not in p] or pairs
    prim, off = r.choice(pairs)
    victim = sim.nodes[off]
    if victim.up and all(n.up for n in sim.nodes.values()):  # (never a second one: the quorum)
        victim.crash()
        sim.stats["crashes"] += 1
        sim.stats["long_crashes"] += 1
        sim._at(sim.now + r.randint(3000, 6000), RESTART, victim.id)
    sim.starving[prim] = sim.now + r.randint(3000, 6000)
    sim.stats["starved"] += 1
    sim.log(f"failover fault: n{off} down for long, n{prim} starved (its lease messages lost or late)")


def failover_fault(sim: FailoverSimulation) -> None:
    r = sim.frng
    if sim.starving_mix and r.random() < 0.6:
        starve_fault(sim)
        return
    st = sim._latest_map()
    lead = sim.leader()
    prims = sorted({st["volumes"][u]["primary"] for u in sim.vols})
    ids = sorted(sim.nodes)
    y = r.random()
    cut, crash, one = (0.6, 1.0, 0.3) if sim.classic else (0.45, 0.7, 0.25)
    long_ms = (800, 3000) if sim.classic else LONG_MS
    if y < cut:
        if y < one:
            side = [r.choice(prims)]
        elif lead is not None and len(ids) >= 5:
            others = [p for p in prims if p != lead.id]
            side = [lead.id, r.choice(others)] if others else [lead.id]
        else:
            side = [lead.id] if lead is not None else [r.choice(prims)]
        rest = [i for i in ids if i not in side]
        before = set(sim.net.blocked)
        sim.net.partition(side, rest)
        how = r.random()
        if how < 0.4:
            sim.net.partition(side, [HOST])  # cut off from everyone, the host too
        ok: set[tuple[int, int]] = set()
        if 0.4 <= how < 0.7:  # the cluster network only: the storage network still carries data
            ok = {(a, b) for a in side for b in rest} | {(b, a) for a in side for b in rest}
            sim.storage_ok |= ok
        until = sim.now + r.randint(*long_ms)
        if not sim.classic:  # (classic: any heal ends it)
            sim.long_cuts.append(LongCut(until, sim.net.blocked - before, ok))
        sim.stats["long_partitions"] += 1
        sim.log(f"failover fault: partition {side} | rest ({how:.2f})")
        sim._at(until, FO_UNCUT, None)
    elif y < crash:
        victim = sim.nodes[r.choice(prims)]
        if victim.up:
            victim.crash()
            sim.stats["crashes"] += 1
            sim.stats["long_crashes"] += 1
            sim.log(f"failover fault: n{victim.id} down for long")
            sim._at(sim.now + r.randint(*long_ms), RESTART, victim.id)
    else:
        nid = r.choice(prims)
        sim.stats["drains"] += 1
        sim.log(f"failover fault: drain n{nid}")
        sim._at(sim.now, FO_DRAIN, (nid, "draining", sim.now + 3 * DRAIN_RETRY_MS))
        sim._at(sim.now + r.randint(300, 2500), FO_DRAIN, (nid, "active", None))


def drain_step(sim: FailoverSimulation, nid: int, state: str, deadline: int | None) -> None:
    """Ask the leader for `state` until the map holds it (a drain gives up at `deadline`)."""
    if (sim._latest_map()["nodes"].get(nid) or {}).get("state", "active") == state:
        return
    lead = sim.leader()
    if lead is not None and lead.cmap is not None:
        propose(sim, lead, encode_command("node_set_state", {"node_id": nid, "state": state}))
    if deadline is None or sim.now + DRAIN_RETRY_MS <= deadline:
        sim._at(sim.now + DRAIN_RETRY_MS, FO_DRAIN, (nid, state, deadline))


def undrain_all(sim: FailoverSimulation) -> None:
    """Once the faults stop, and every 0.3 s after (a drain proposed before may commit late)."""
    for nid, node in sorted(sim._latest_map()["nodes"].items()):
        if node.get("state") == "draining":
            drain_step(sim, nid, "active", sim.now)
    sim._at(sim.now + UNDRAIN_EVERY_MS, FO_DRAIN, None)


def maybe_replay_report(sim: FailoverSimulation, body: dict[str, Any]) -> None:
    if sim.replay_p and sim.frng.random() < sim.replay_p:
        sim._at(sim.now + sim.frng.randint(300, 2500), FO_REPLAY, body)


def replay_report(sim: FailoverSimulation, body: dict[str, Any]) -> None:
    lead = sim.leader()
    if lead is not None and lead.cmap is not None:
        sim.stats["report_replays"] += 1
        propose(sim, lead, body["cmd"])
