"""The failover workload's simulated node agents (nodeosd's agent on a simulated node).

`SimFailoverAgent` decides with the product's own rules (sim_legs.py) and configures the node's
simulated kernel (sim_kernel.py, sim_md.py), which carries the data path:
- lease: a real `LeaseKeeper` (nodeos/agent/lease.py) holds it; a renewal every `renew_s` to
  the node its Raft node believes leads (one at a time, given up after max(2 renew_s, 1 s));
  the fence (`fence_wanted`) is re-evaluated every tick (the real fence loop: every 0.1 s); a
  restarted agent starts fenced. A fence leaves out the volumes the keeper keeps open
  (`kept_open`: the only in-sync replica is this primary's, issue 29), and out of the lease's
  standing a report calls no leg in sync the map does not count (`reportable`). The front end
  of a primary is ANA optimized only while the agent is unfenced (or keeps it open), the
  mirror assembled and no hand-over or delete holds it.
- map: the agent reads its own node's copy. Primary at epoch e: a mirror whose legs connect
  (the replica answers only once its export follows this primary at e), get a full copy and
  join md; the front end opens once md holds every replica the map counts in sync (or may,
  `counted_in_sync`). Replica: its export follows (primary, epoch) of the map (a retarget). A
  primary the map moved away demotes (md stops, what it held fails back to the host).
- legs: the leg watch's rules (`not_live_since`, `down_nodes`, `removable`, `pending`): a leg
  whose controller has not been live for LEG_DOWN_S is reported failed; once the map no longer
  counts it in sync it is cut (md completes the held writes on the other legs), then
  reattached and copied again. md never drops a leg on its own (sim_md.py).
- delete: the plan's order (sim_teardown.py).
The leader shell (nodeos/control/failover_loop.py on a simulated node): failover_leader.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodeos.agent.lease import reportable
from nodeos.cluster.map import encode_command
from nodeos.storage import failover

from . import sim_teardown
from .node import SimNode
from .sim_kernel import KERNEL_KINDS, SimKernel
from .sim_legs import LegWatch, assembled, granted, leg_states, new_keeper
from .sim_md import Ctrl, Mirror

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation

__all__ = ["Mirror", "SimFailoverAgent"]
REPORT_MIN_S = 0.1
REPORT_EVERY_S = 1.0  # a report now and then even with nothing new (as the real agent)


class SimFailoverAgent:
    def __init__(self, nid: int, timing: failover.LeaseTiming, broken: str | None, now: float) -> None:
        self.nid = nid
        self.timing = timing
        self.broken = broken
        self.keeper = new_keeper(timing)
        self.inflight: tuple[int, float, float] | None = None  # (request, sent, deadline)
        self.next_renew = now
        self.req = 0
        self.k: SimKernel | None = None  # found at the first look (sim.plane.attach)
        self.watch = LegWatch()
        self.down: dict[str, set[int]] = {}
        self.waits: dict[str, float] = {}  # uuid -> since when my replica waits for its primary
        self.seq = 0
        self.last_report = -1e9
        self.last_forced = now
        self.sent: list[tuple[int, dict[str, list[int]]]] = []  # (seq, vol -> legs called in-sync)
        self.kept: frozenset[str] = frozenset()  # primaries served although fenced (lease.py)

    # --- the kernel and the lease ---
    def kernel(self, sim: FailoverSimulation) -> SimKernel:
        if self.k is None:
            self.k = sim.plane.attach(self.nid, self.broken)
        return self.k

    @property
    def mirrors(self) -> dict[str, Mirror]:
        return self.k.mirrors if self.k is not None else {}

    @property
    def fenced(self) -> bool:
        return self.keeper.fenced

    def writable(self, uuid: str) -> bool:
        m = self.mirrors.get(uuid)
        served = not self.keeper.fenced or uuid in self.kept
        return m is not None and m.assembled and not m.closing and served

    def _lease_tick(self, sim: FailoverSimulation, n: SimNode, now: float) -> None:
        if self.inflight is not None and now > self.inflight[2]:
            self.next_renew = max(self.inflight[1] + self.timing.renew_s, now)
            self.inflight = None
            self.keeper.failures += 1
            sim.stats["lease_failures"] += 1
        if self.inflight is None and now >= self.next_renew:
            assert n.rn is not None
            lead = n.rn.raft.lead
            if not lead:
                self.next_renew = now + self.timing.renew_s
                return
            self.req += 1
            self.inflight = (self.req, now, now + max(2 * self.timing.renew_s, 1.0))
            sim.fo_send("lease", self.nid, lead, {"req": self.req})

    def lease_answer(self, body: dict[str, Any], ok: bool, now: float) -> None:
        if self.inflight is None or self.inflight[0] != body["req"]:
            return  # an answer to a request given up on
        sent = self.inflight[1]
        self.inflight = None
        self.next_renew = max(sent + self.timing.renew_s, now)
        if ok:
            granted(self.keeper, sent, body["health"], body["index"])

    def _want_fence(self, now: float, applied: int) -> bool:
        k = self.keeper
        if self.broken == "no_self_fence":
            return k.granted_at is None
        if self.broken == "unfence_on_any_grant":
            return not k.valid(now)  # nodeos/agent/lease.py before this workload
        return k.fence_wanted(now, applied)

    def _kept_open(self, st: dict[str, Any], now: float) -> frozenset[str]:
        """What the product's keeper leaves unfenced (nodeos/agent/lease.py `kept_open`)."""
        k = self.keeper
        if self.broken == "keep_open_in_sync_elsewhere":  # sole_primaries without its in-sync test
            k.kept_open(now, st, self.nid, self.sent)  # (its caught-up bookkeeping)
            if not k.caught_up or not self.fenced:
                return frozenset()
            mine = {u for u, v in st["volumes"].items() if v["primary"] == self.nid and v["state"] == "ready"}
            return frozenset(mine)
        return k.kept_open(now, st, self.nid, self.sent) if self.fenced else frozenset()

    def _standing(self, st: dict[str, Any], now: float) -> bool:
        if self.broken == "report_in_sync_out_of_standing":
            return True
        return self.keeper.standing(now, st["applied_index"])

    # --- the tick: lease, fence, follow the map, legs, delete, report ---
    def tick(self, sim: FailoverSimulation, n: SimNode, now: float) -> None:
        k = self.kernel(sim)
        k.tick(sim, now)
        self._lease_tick(sim, n, now)
        assert n.cmap is not None
        st = n.cmap.state
        fenced = self._want_fence(now, st["applied_index"])
        if fenced != self.keeper.fenced:
            sim.stats["fences"] += fenced
            sim.log(
                f"n{self.nid} agent {'fenced' if fenced else 'unfenced'} (granted {self.keeper.granted_at})"
            )
        self.keeper.fenced = fenced
        kept = self._kept_open(st, now)
        if kept != self.kept:
            sim.stats["kept_open"] += len(kept - self.kept)
            sim.log(f"n{self.nid} agent: fence left off for {sorted(u[-2:] for u in kept)}")
        self.kept = kept
        self._follow(sim, st, now)
        self._watch_legs(sim, st, now)
        sim_teardown.step(self, sim, st, now)
        for uuid, m in k.mirrors.items():
            m.front_open = self.writable(uuid)
        self._report(sim, st, now)

    def _follow(self, sim: FailoverSimulation, st: dict[str, Any], now: float) -> None:
        me, k = self.nid, self.kernel(sim)
        recs = sim.plane.records[me]
        for uuid, vol in st["volumes"].items():
            rec = recs.get(uuid)
            if rec is None or rec["state"] == "deleting" or vol["state"] == "deleting":
                continue  # torn down, or going: the delete's order (sim_teardown.py)
            if vol["epoch"] < sim.dp.epoch_of.get((uuid, me), 0) and self.broken != "no_epoch_check":
                continue  # a map read back after a restart, behind what the node followed already
            m = k.mirrors.get(uuid)
            if vol["primary"] == me:
                if m is None or m.epoch != vol["epoch"]:
                    if m is not None:
                        k.fail_all(sim, uuid, m)
                    legs = [s["node"] for s in vol["placement"] if s["node"] != me]
                    new = k.new_mirror(uuid, vol["epoch"], legs, now)
                    new.restart = rec.get("role") == "primary" and rec.get("epoch") == vol["epoch"]
                    k.accept.pop(uuid, None)
                    rec.update(role="primary", epoch=vol["epoch"])
                    sim.dp.retarget(uuid, me, vol["epoch"])
                    sim.stats["promotions"] += 1
                    sim.log(f"n{me} agent: primary of {uuid[-2:]} at epoch {vol['epoch']}")
                continue
            if m is not None:
                k.fail_all(sim, uuid, m)
                del k.mirrors[uuid]
                sim.stats["demotions"] += 1
                sim.log(f"n{me} agent: demoted from {uuid[-2:]} (epoch {m.epoch} -> {vol['epoch']})")
            want = (vol["primary"], vol["epoch"])
            if k.accept.get(uuid) != want:
                k.accept[uuid] = want
                rec.update(role="secondary", epoch=vol["epoch"])
                sim.dp.retarget(uuid, me, vol["epoch"])

    def _watch_legs(self, sim: FailoverSimulation, st: dict[str, Any], now: float) -> None:
        """nodeos/agent/legwatch.py over the simulated controllers, with the product's rules."""
        k = self.kernel(sim)
        self.watch.look(k.mirrors, now)
        held, sent = st["reports"].get(self.nid), list(self.sent)
        recs = sim.plane.records[self.nid]
        for uuid, m in k.mirrors.items():
            if (recs.get(uuid) or {}).get("state") != "ready" or m.closing:
                continue  # a delete cuts its own legs
            vol = st["volumes"].get(uuid)
            self.down[uuid] = self.watch.down(uuid, m, now)
            for nid in self.watch.removable(vol, uuid, m, self.nid, self.down[uuid], held, sent):
                m.cut([nid], now)  # drop_mirror_leg
                sim.log(f"n{self.nid} agent: {uuid[-2:]} epoch {m.epoch}: leg n{nid} cut (map: not in sync)")
            m.frozen = self.watch.hold(vol, uuid, m, self.nid, held, sent)
            for leg in m.legs.values():
                if leg.state == "failed" and leg.ctrl is None:
                    leg.ctrl = Ctrl("connecting", now)  # the rejoin step attaches it again
            if not m.front_open:  # checked again until the front end opens (after the fence lifts)
                m.assembled = assembled(st, vol, m, self.nid, held, sent)

    def _report(self, sim: FailoverSimulation, st: dict[str, Any], now: float) -> None:
        if now - self.last_report < REPORT_MIN_S:
            return
        held = st["reports"].get(self.nid) or {}
        replicas: dict[str, Any] = {}
        called: dict[str, list[int]] = {}
        for uuid, rec in sorted(sim.plane.records[self.nid].items()):
            vol = st["volumes"].get(uuid)
            epoch = vol["epoch"] if vol is not None else rec.get("epoch", 1)
            r: dict[str, Any] = {
                "state": "in-sync",
                "size_bytes": vol["size_bytes"] if vol is not None else rec["size_bytes"],
                "hosts": [],
                "error": None,
                "epoch": epoch,
            }
            why = self.waits_why(sim, st, uuid)
            if why is not None:
                r["step"] = why
            m = self.mirrors.get(uuid)
            if m is not None:
                members = leg_states(m, self.down.get(uuid, ()))
                r.update(epoch=m.epoch, members=members, **self.report_extra(uuid, m))
            replicas[uuid] = r
        replicas = reportable(replicas, st["volumes"], self._standing(st, now))
        for uuid, r in replicas.items():
            if "members" in r:
                called[uuid] = sorted(x for x, s in r["members"].items() if s == "in-sync")
        forced = now - self.last_forced > REPORT_EVERY_S
        if held.get("replicas") == replicas and not forced:
            return
        self.last_report = now
        self.last_forced = now
        self.seq = max(held.get("seq", 0), self.seq) + 1
        self.sent = [x for x in self.sent if x[0] > held.get("seq", 0)] + [(self.seq, called)]
        pools = {
            p["pool_id"]: {"name": p["name"], "state": "ready", "size_bytes": 1 << 40, "free_bytes": 1 << 39}
            for p in st["pools"].values()
            if p["node"] == self.nid
        }
        args = {
            "node_id": self.nid,
            "seq": self.seq,
            "dataplane": {"name": "sim", "listeners": [], "error": None},
            "drives": {},
            "pools": pools,
            "replicas": replicas,
            "snapshots": {},
        }
        lead = sim.leader_of(self.nid)
        if lead:
            sim.log(f"n{self.nid} agent: report seq {self.seq}: {called}")
            sim.fo_send("report", self.nid, lead, {"cmd": encode_command("node_report", args)})

    def waits_why(self, sim: FailoverSimulation, st: dict[str, Any], uuid: str) -> str | None:
        return sim_teardown.waits_why(self, sim, st, uuid)

    def report_extra(self, uuid: str, m: Mirror) -> dict[str, Any]:
        """More fields for a primary's replica report (the hand-over: failover_handoff.py)."""
        return {}

    # --- messages ---
    def on_message(
        self, sim: FailoverSimulation, n: SimNode, kind: str, frm: int, body: dict[str, Any]
    ) -> None:
        if kind in ("lease_ok", "lease_no"):
            self.lease_answer(body, kind == "lease_ok", sim.clock(self.nid))
        elif kind in KERNEL_KINDS:
            self.kernel(sim).on_message(sim, kind, frm, body)
