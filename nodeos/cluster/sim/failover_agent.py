"""The failover workload's simulated node agents.

`SimFailoverAgent` is one storage node's agent as nodeos/agent/lease.py and the plan's
retarget / promote / demote / rejoin steps describe it, over `SimDataPlane`:
- lease: a renewal every `renew_s` to the node its Raft node believes leads (one at a time,
  given up after max(2 renew_s, 1 s)); the lease counts from the *send* time of the last
  granted renewal; the fence is re-evaluated every tick (the real fence loop: every 0.1 s)
  and is on once `fence_after_s` passed (a restarted agent starts fenced);
- map: the agent reads its own node's copy of the map. Primary at epoch e: a mirror whose
  legs attach (the replica answers only once it follows this primary at e), get a full copy
  (rebuild) and turn in-sync. Replica: accepts leg writes only from (primary, epoch) of its
  map (fence at the replicas); a new epoch is a retarget. A primary the map moved away demotes.
- writes: a host write is taken only by an unfenced primary; it goes to every leg; a leg that
  refuses or does not answer in `LEG_TIMEOUT_S` is dropped (md degrades silently) and reported
  failed in the next report. The write is acknowledged only once every leg the map may count
  as in-sync has it: the map's in-sync set as this node sees it, and every leg an own report
  (sent, not yet overtaken) calls in-sync. Otherwise it is held until the map dropped the leg;
  a fence, demotion or crash fails held writes. Two writes to one block are never in flight on
  one leg together: a leg write waits until the leg answered (or was dropped for) every earlier
  write to that block, as md raid1 does with `serialize_policy` on, which the product sets on
  every mirror (nodeos/dataplane/kernel/md_serial.py; seed 4646 on 5 nodes: a host's timed-out
  write, still in flight on a leg, landed over the newer write the host's retry led to).
The leader shell (nodeos/control/failover_loop.py on a simulated node): failover_leader.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodeos.cluster import failover
from nodeos.cluster.failover_map import in_sync_of
from nodeos.cluster.map import encode_command

from .node import SimNode

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation

LEG_TIMEOUT_S = 0.2  # a leg write unanswered this long: the mirror drops the leg
ATTACH_TIMEOUT_S = 0.3
ATTACH_RETRY_S = 0.3
RESYNC_TIMEOUT_S = 1.0
REPORT_MIN_S = 0.1
REPORT_EVERY_S = 1.0  # a report now and then even with nothing new (as the real agent)


@dataclass
class Leg:
    state: str  # attaching | failed | syncing | in-sync
    since: float
    attach_sent: float | None = None
    gen: int = 0  # the connection the leg's writes go through (a new one at every attach)


@dataclass
class Pending:
    lba: int
    version: int
    attempt: int  # the host's attempt to answer
    sent: float
    waiting: set[int]
    acked_by: set[int] = field(default_factory=set)
    gens: dict[int, int] = field(default_factory=dict)  # leg -> the connection the write went on
    held: set[int] = field(default_factory=set)  # legs it waits on behind an earlier write to its lba
    sent_at: dict[int, float] = field(default_factory=dict)  # leg -> when it went out on it


@dataclass
class Mirror:
    epoch: int
    legs: dict[int, Leg]
    pending: dict[int, Pending] = field(default_factory=dict)


class SimFailoverAgent:
    def __init__(self, nid: int, timing: failover.LeaseTiming, broken: str | None, now: float) -> None:
        self.nid = nid
        self.timing = timing
        self.broken = broken
        self.granted_at: float | None = None
        self.fenced = True
        self.grant: tuple[str, int] = ("down", 0)  # the last grant's (health, leader's applied index)
        self.inflight: tuple[int, float, float] | None = None  # (request, sent, deadline)
        self.next_renew = now
        self.req = 0
        self.mirrors: dict[str, Mirror] = {}
        self.accept: dict[str, tuple[int, int]] = {}
        self.conn: dict[str, int] = {}  # as a replica: the primary's connection it takes writes from
        self.seq = 0
        self.last_report = -1e9
        self.last_forced = now
        self.sent: list[tuple[int, dict[str, set[int]]]] = []  # (seq, vol -> legs called in-sync)
        self.wid = 0
        self.valid_at_tick = False

    # --- lease ---
    def valid(self, now: float) -> bool:
        return self.granted_at is not None and now - self.granted_at < self.timing.fence_after_s

    def writable(self, uuid: str) -> bool:
        return uuid in self.mirrors and not self.fenced

    def _lease_tick(self, sim: FailoverSimulation, n: SimNode, now: float) -> None:
        if self.inflight is not None and now > self.inflight[2]:
            self.next_renew = max(self.inflight[1] + self.timing.renew_s, now)
            self.inflight = None
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
            self.granted_at = max(self.granted_at or sent, sent)
            self.grant = (body["health"], body["index"])

    def _want_fence(self, applied: int) -> bool:
        """Fenced without a valid lease. A grant lifts the fence only when the leader calls
        the node up and the node's own map has applied what the leader had at the grant (it
        then knows of every failover that took its volumes); a grant saying down fences."""
        if self.broken == "no_self_fence":
            return self.granted_at is None
        if self.broken == "unfence_on_any_grant":
            return not self.valid_at_tick  # nodeos/agent/lease.py before this workload
        if not self.valid_at_tick or self.grant[0] != "up":
            return True
        return self.fenced and applied < self.grant[1]

    # --- the tick: lease, fence, follow the map, mirrors, report ---
    def tick(self, sim: FailoverSimulation, n: SimNode, now: float) -> None:
        self._lease_tick(sim, n, now)
        assert n.cmap is not None
        self.valid_at_tick = self.valid(now)
        fenced = self._want_fence(n.cmap.state["applied_index"])
        if fenced != self.fenced:
            sim.stats["fences"] += fenced
            sim.log(f"n{self.nid} agent {'fenced' if fenced else 'unfenced'} (granted at {self.granted_at})")
        self.fenced = fenced
        assert n.cmap is not None
        st = n.cmap.state
        self._follow(sim, st, now)
        for uuid, m in self.mirrors.items():
            self._upkeep(sim, st, uuid, m, now)
        self._report(sim, st, now)

    def _follow(self, sim: FailoverSimulation, st: dict[str, Any], now: float) -> None:
        me = self.nid
        for uuid, vol in st["volumes"].items():
            nodes = [s["node"] for s in vol["placement"]]
            if me not in nodes:
                continue
            if vol["epoch"] < sim.dp.epoch_of.get((uuid, me), 0) and self.broken != "no_epoch_check":
                continue  # a map read back after a restart, behind what the node followed already
            m = self.mirrors.get(uuid)
            if vol["primary"] == me:
                if m is None or m.epoch != vol["epoch"]:
                    if m is not None:
                        self._fail_all(sim, uuid, m)
                    legs = {x: Leg("attaching", now) for x in nodes if x != me}
                    self.mirrors[uuid] = Mirror(vol["epoch"], legs)
                    self.accept.pop(uuid, None)
                    sim.dp.retarget(uuid, me, vol["epoch"])
                    sim.stats["promotions"] += 1
                    sim.log(f"n{me} agent: primary of {uuid[-2:]} at epoch {vol['epoch']}")
                continue
            if m is not None:
                self._fail_all(sim, uuid, m)
                del self.mirrors[uuid]
                sim.stats["demotions"] += 1
                sim.log(f"n{me} agent: demoted from {uuid[-2:]} (epoch {m.epoch} -> {vol['epoch']})")
            want = (vol["primary"], vol["epoch"])
            if self.accept.get(uuid) != want:
                self.accept[uuid] = want
                sim.dp.retarget(uuid, me, vol["epoch"])

    def _upkeep(self, sim: FailoverSimulation, st: dict[str, Any], uuid: str, m: Mirror, now: float) -> None:
        for nid, leg in m.legs.items():
            limit = {"attaching": ATTACH_TIMEOUT_S, "syncing": RESYNC_TIMEOUT_S}.get(leg.state)
            if limit is not None and now - leg.since > limit:
                leg.state, leg.since = "failed", now
            if leg.state in ("attaching", "failed") and (
                leg.attach_sent is None or now - leg.attach_sent > ATTACH_RETRY_S
            ):
                leg.attach_sent = now
                sim.next_ctx += 1
                sim.fo_send("attach", self.nid, nid, {"vol": uuid, "epoch": m.epoch, "gen": sim.next_ctx})
        for p in list(m.pending.values()):
            for nid in sorted(p.waiting - p.held):  # a held write is not on the leg yet: no timer
                if now - p.sent_at.get(nid, p.sent) > LEG_TIMEOUT_S:
                    p.waiting.discard(nid)
                    self._leg_failed(sim, m, nid, now)  # also drops what was held behind it
        for wid in list(m.pending):
            self._try_complete(sim, st, uuid, m, wid)
        if self.fenced:
            for wid, p in list(m.pending.items()):
                if not p.waiting:  # held: the host tries elsewhere
                    del m.pending[wid]
                    sim.fo_send("w_no", self.nid, 0, {"vol": uuid, "attempt": p.attempt})

    def _leg_failed(self, sim: FailoverSimulation, m: Mirror, nid: int, now: float) -> None:
        leg = m.legs[nid]
        if leg.state in ("in-sync", "syncing"):
            leg.state, leg.since = "failed", now
            sim.log(f"n{self.nid} agent: mirror at epoch {m.epoch} drops leg n{nid}")
        for p in m.pending.values():  # the writes waiting to go out on it go nowhere: md failed the leg
            if nid in p.held:
                p.held.discard(nid)
                p.waiting.discard(nid)

    def _behind(self, m: Mirror, wid: int, p: Pending, nid: int) -> bool:
        """md raid1's serialize_policy: an earlier write to the same block is still in flight on
        (or waiting for) leg `nid` on this connection."""
        if self.broken == "no_write_serialize":
            return False
        for w, q in m.pending.items():
            if w >= wid:
                return False
            if q.lba == p.lba and nid in q.waiting and q.gens.get(nid) == p.gens.get(nid):
                return True
        return False

    def _send_leg(
        self, sim: FailoverSimulation, uuid: str, m: Mirror, wid: int, p: Pending, nid: int
    ) -> None:
        p.sent_at[nid] = sim.clock(self.nid)
        body = {"vol": uuid, "epoch": m.epoch, "wid": wid, "gen": p.gens[nid], "lba": p.lba}
        sim.fo_send("leg", self.nid, nid, {**body, "version": p.version})

    def _release(self, sim: FailoverSimulation, uuid: str, m: Mirror, lba: int, nid: int, now: float) -> None:
        """Leg `nid` is done with a write to `lba`: the next write held behind it goes out."""
        for wid, p in m.pending.items():
            if p.lba == lba and nid in p.held:
                if not self._behind(m, wid, p, nid):
                    p.held.discard(nid)
                    self._send_leg(sim, uuid, m, wid, p, nid)
                return

    def _fail_all(self, sim: FailoverSimulation, uuid: str, m: Mirror) -> None:
        for p in m.pending.values():
            sim.fo_send("w_no", self.nid, 0, {"vol": uuid, "attempt": p.attempt})
        m.pending.clear()

    def _needed(self, st: dict[str, Any], uuid: str) -> set[int]:
        """The legs the map counts, or may count once a report of ours lands, as in-sync."""
        if self.broken == "ack_degraded":
            return set()
        vol = st["volumes"].get(uuid)
        need = set(in_sync_of(vol)) if vol is not None else set()
        if self.broken == "ack_on_map_view":
            return need - {self.nid}
        held = (st["reports"].get(self.nid) or {}).get("seq", 0)
        for seq, legs in self.sent:
            if seq >= held:
                need |= legs.get(uuid, set())
        rep = ((st["reports"].get(self.nid) or {}).get("replicas") or {}).get(uuid) or {}
        need |= {int(k) for k, v in (rep.get("members") or {}).items() if v == "in-sync"}
        need.discard(self.nid)
        return need

    def _try_complete(
        self, sim: FailoverSimulation, st: dict[str, Any], uuid: str, m: Mirror, wid: int
    ) -> None:
        p = m.pending[wid]
        if p.waiting or not self._needed(st, uuid) <= p.acked_by:
            return
        del m.pending[wid]
        sim.log(f"n{self.nid} agent: {uuid[-2:]} lba {p.lba} v{p.version} done on {sorted(p.acked_by)}")
        sim.fo_send("w_ok", self.nid, 0, {"vol": uuid, "attempt": p.attempt})

    def _report(self, sim: FailoverSimulation, st: dict[str, Any], now: float) -> None:
        if now - self.last_report < REPORT_MIN_S:
            return
        held = st["reports"].get(self.nid) or {}
        replicas: dict[str, Any] = {}
        called: dict[str, set[int]] = {}
        for uuid, vol in st["volumes"].items():
            if all(s["node"] != self.nid for s in vol["placement"]):
                continue
            r: dict[str, Any] = {
                "state": "in-sync",
                "size_bytes": vol["size_bytes"],
                "hosts": sorted(vol["hosts"]),
                "error": None,
                "epoch": vol["epoch"],
            }
            m = self.mirrors.get(uuid)
            if m is not None:
                members = {x: leg.state for x, leg in m.legs.items() if leg.state != "attaching"}
                r.update(epoch=m.epoch, members=members)
                called[uuid] = {x for x, s in members.items() if s == "in-sync"}
            replicas[uuid] = r
        forced = now - self.last_forced > REPORT_EVERY_S
        if held.get("replicas") == replicas and not forced:
            return
        self.last_report = now
        self.last_forced = now
        self.seq = max(held.get("seq", 0), self.seq) + 1
        self.sent = [x for x in self.sent if x[0] >= held.get("seq", 0)] + [(self.seq, called)]
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

    # --- messages ---
    def on_message(
        self, sim: FailoverSimulation, n: SimNode, kind: str, frm: int, body: dict[str, Any]
    ) -> None:
        now = sim.clock(self.nid)
        assert n.cmap is not None
        st = n.cmap.state
        uuid = body.get("vol", "")
        m = self.mirrors.get(uuid)
        if kind == "lease_ok" or kind == "lease_no":
            self.lease_answer(body, kind == "lease_ok", now)
        elif kind == "write":
            if m is None or self.fenced:
                sim.fo_send("w_no", self.nid, frm, {"vol": uuid, "attempt": body["attempt"]})
                return
            sim.dp.write(uuid, self.nid, body["lba"], body["version"], m.epoch, self.nid)
            self.wid += 1
            legs = {x for x, leg in m.legs.items() if leg.state in ("in-sync", "syncing")}
            gens = {x: m.legs[x].gen for x in legs}
            p = Pending(body["lba"], body["version"], body["attempt"], now, set(legs), gens=gens)
            m.pending[self.wid] = p
            for x in sorted(legs):
                if self._behind(m, self.wid, p, x):
                    p.held.add(x)
                    sim.stats["leg_writes_held"] += 1
                    sim.log(f"n{self.nid} agent: {uuid[-2:]} lba {p.lba} v{p.version} waits for leg n{x}")
                else:
                    self._send_leg(sim, uuid, m, self.wid, p, x)
            self._try_complete(sim, st, uuid, m, self.wid)
        elif kind == "leg":
            ok = self._accepts(uuid, frm, body["epoch"], body["gen"])
            if ok:
                sim.dp.write(uuid, self.nid, body["lba"], body["version"], body["epoch"], frm)
            answer = {"vol": uuid, "wid": body["wid"], "gen": body["gen"]}
            sim.fo_send("leg_ok" if ok else "leg_no", self.nid, frm, answer)
        elif kind in ("leg_ok", "leg_no"):
            p = m.pending.get(body["wid"]) if m is not None else None
            # An answer comes back on the connection the write went on: one from an earlier
            # connection (or a previous life of this node, whose write ids started over) is not
            # this write's (seed 2420 on 5 nodes: a stale ack taken for a newer write).
            if m is None or p is None or frm not in p.waiting or p.gens.get(frm) != body["gen"]:
                return
            p.waiting.discard(frm)
            if kind == "leg_ok":
                p.acked_by.add(frm)
            else:
                self._leg_failed(sim, m, frm, now)
            self._release(sim, uuid, m, p.lba, frm, now)
            self._try_complete(sim, st, uuid, m, body["wid"])
        elif kind == "attach":
            if self._accepts(uuid, frm, body["epoch"]):
                # A new connection from the primary: the replica drops the older ones first,
                # so nothing queued on them can land after the copy (pitfall 1).
                self.conn[uuid] = body["gen"]
                sim.fo_send("attach_ok", self.nid, frm, body)
        elif kind == "attach_ok":
            leg = m.legs.get(frm) if m is not None and m.epoch == body["epoch"] else None
            if leg is not None and leg.state in ("attaching", "failed"):
                leg.state, leg.since, leg.gen = "syncing", now, body["gen"]
                sim.fo_send("resync", self.nid, frm, {**body, "wid": self.wid}, data=True)
        elif kind == "resync":
            if self._accepts(uuid, frm, body["epoch"], body["gen"]):
                sim.dp.copy(uuid, frm, self.nid, body["epoch"])  # the copy, as one step when it lands
                sim.stats["rebuilds"] += 1
                sim.fo_send("resync_done", self.nid, frm, body)
        elif kind == "resync_done":
            leg = m.legs.get(frm) if m is not None and m.epoch == body["epoch"] else None
            if leg is not None and m is not None and leg.state == "syncing" and leg.gen == body["gen"]:
                leg.state, leg.since = "in-sync", now
                sim.log(f"n{self.nid} agent: leg n{frm} in-sync (epoch {m.epoch})")
                for wid, p in list(m.pending.items()):
                    if wid <= body["wid"]:  # taken locally before the copy: the copy holds it
                        p.acked_by.add(frm)
                        self._try_complete(sim, st, uuid, m, wid)

    def _accepts(self, uuid: str, frm: int, epoch: int, gen: int | None = None) -> bool:
        """Fence at the replica: only the primary it follows, at that epoch (and for data, on
        the primary's latest connection)."""
        if uuid in self.mirrors:
            return False  # it is a primary itself
        if self.accept.get(uuid) != (frm, epoch):
            return self.broken == "no_epoch_check"
        return gen is None or self.conn.get(uuid) == gen
