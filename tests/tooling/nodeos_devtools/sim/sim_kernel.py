"""One simulated node's kernel data plane (a fake, named as such): its md mirrors with their
legs' controllers (sim_md.py), its replica exports (nvmet: which primary, at which epoch, on
which connection a replica takes I/O from) and the primaries' front ends (ANA state).

It lives apart from the node's agent (failover_agent.py) on purpose: when nodeosd alone dies
the kernel keeps serving (exports, md, a front end left optimized, legs requeuing I/O) with
nothing to configure it, until the agent starts again and finds it; a whole-node crash loses
it. The agent configures it (mirrors, exports, front ends, cuts); the messages of the data
path (host writes, leg I/O, connects, keep-alives, rebuild copies) are handled here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sim_md import KA_S, KATO_S, MD_MEMBER, RECONNECT_S, REGION_LBAS, RESYNC_S, Ctrl, Leg, Mirror, Pending

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation

# The kinds this kernel answers (the rest are the agent's: lease answers).
KERNEL_KINDS = frozenset(
    (
        "write",
        "leg",
        "leg_ok",
        "leg_no",
        "attach",
        "attach_ok",
        "resync",
        "resync_done",
        "ka",
        "ka_ok",
        "ka_no",
        "sb",
        "sb_ok",
        "sb_no",
    )
)


def reset_on_unanswered(k: SimKernel, m: Mirror, nid: int, now: float) -> None:
    """What an I/O or keep-alive unanswered for KATO_S does: nvme resets the controller and
    requeues the I/O (ctrl_loss_tmo=-1: for ever). The deliberately broken `md_fails_leg`
    replaces it (tests/sim/test_sim_faithful.py, failover_broken.py `ack_degraded`)."""
    k.not_live(m, nid, now)


def md_fails_leg(k: SimKernel, m: Mirror, nid: int, now: float) -> None:
    """Broken on purpose: md fails a leg whose I/O went unanswered and completes the held writes
    on the other legs at once (what the simulator modelled before issue 25, and what a leg
    attached with a finite fast_io_fail_tmo does), before the map stops counting it in sync."""
    k.not_live(m, nid, now)
    m.fail_member(nid, now)
    m.sb.clear()


def resync_regions(m: Mirror, nid: int) -> list[int] | None:
    """What a leg joining md gets copied: the regions its bitmap holds, None for all (no base in
    this md). The deliberately broken `skip_first_region` replaces it (failover_broken.py)."""
    regions = m.dirty.get(nid)
    return None if regions is None else sorted(regions)


def skip_first_region(m: Mirror, nid: int) -> list[int] | None:
    """Broken on purpose: the partial resync leaves out the first region md wrote while the leg
    was away (else the first one it had in flight when it left, which may have landed)."""
    regions = m.dirty.get(nid)
    if regions is None:
        return None
    away = [r for r, how in regions.items() if how == "away"]
    skip = away[0] if away else next(iter(regions), None)
    return sorted(r for r in regions if r != skip)


class SimKernel:
    def __init__(self, nid: int, broken: str | None) -> None:
        self.nid = nid
        self.broken = broken
        self.mirrors: dict[str, Mirror] = {}
        self.accept: dict[str, tuple[int, int]] = {}  # replica export: uuid -> (primary, epoch)
        self.conn: dict[str, int] = {}  # as a replica: the primary's connection it takes I/O from
        self.wid = 0

    # --- set up by the agent ---
    def new_mirror(self, uuid: str, epoch: int, legs: list[int], now: float) -> Mirror:
        m = Mirror(epoch, {x: Leg("attaching", now, Ctrl("connecting", now)) for x in legs})
        self.mirrors[uuid] = m
        return m

    def not_live(self, m: Mirror, nid: int, now: float) -> None:
        ctrl = m.legs[nid].ctrl
        if ctrl is None or ctrl.state != "live":
            return
        ctrl.state, ctrl.since, ctrl.probe = "connecting", now, None
        for p in m.pending.values():
            if nid in p.waiting:
                p.sent_at.pop(nid, None)  # requeued: goes out again on the next connection
        if nid in m.sb:
            m.sb[nid] = None

    # --- the kernel's own timers ---
    def tick(self, sim: FailoverSimulation, now: float) -> None:
        for uuid, m in list(self.mirrors.items()):
            for nid, leg in sorted(m.legs.items()):
                ctrl = leg.ctrl
                if ctrl is None:
                    continue
                if ctrl.state == "live":
                    old = [
                        p.sent_at[nid] for p in m.pending.values() if nid in p.waiting and nid in p.sent_at
                    ]
                    sb = m.sb.get(nid)
                    old += [sb] if sb is not None else []
                    late = any(now - t > KATO_S for t in old)
                    if late or (ctrl.probe is not None and now - ctrl.probe > KATO_S):
                        reset_on_unanswered(self, m, nid, now)
                    elif ctrl.probe is None and not old and now - ctrl.last_ka > KA_S:
                        ctrl.probe = ctrl.last_ka = now
                        body = {"vol": uuid, "epoch": m.epoch, "gen": ctrl.gen}
                        sim.fo_send("ka", self.nid, nid, body, data=True)
                if ctrl.state == "live" and leg.state == "syncing" and now - leg.since > RESYNC_S:
                    leg.since = now  # md's recovery starts over (its copy went unanswered)
                    self._send_resync(sim, uuid, m, nid, ctrl.gen)
                if ctrl.state != "live" and ctrl.bounded and leg.state in MD_MEMBER:
                    m.fail_member(nid, now)  # fast_io_fail_tmo 0: its I/O fails, md fails the leg
                elif ctrl.state != "live" and now - ctrl.tried > RECONNECT_S:
                    ctrl.tried = now
                    sim.next_ctx += 1
                    ctrl.gen = sim.next_ctx  # a new connection (the replica drops the older ones)
                    sim.fo_send("attach", self.nid, nid, {"vol": uuid, "epoch": m.epoch, "gen": ctrl.gen})
            m.write_superblock(now)
            for nid in sorted(m.sb):
                ctrl = m.legs[nid].ctrl
                if m.sb[nid] is None and ctrl is not None and ctrl.state == "live":
                    m.sb[nid] = now
                    body = {"vol": uuid, "epoch": m.epoch, "gen": ctrl.gen}
                    sim.fo_send("sb", self.nid, nid, body, data=True)
            for wid in list(m.pending):
                self._try_complete(sim, uuid, m, wid)

    # --- the data path ---
    def fail_all(self, sim: FailoverSimulation, uuid: str, m: Mirror) -> None:
        """The mirror goes (demoted, stopped): what it held fails back to the host."""
        for p in m.pending.values():
            sim.fo_send("w_no", self.nid, 0, {"vol": uuid, "attempt": p.attempt})
        m.pending.clear()

    def _send_leg(
        self, sim: FailoverSimulation, uuid: str, m: Mirror, wid: int, p: Pending, nid: int
    ) -> None:
        ctrl = m.legs[nid].ctrl
        if ctrl is None or ctrl.state != "live":
            return  # queued on the controller until it is live again
        p.gens[nid] = ctrl.gen
        p.sent_at[nid] = sim.clock(self.nid)
        body = {"vol": uuid, "epoch": m.epoch, "wid": wid, "gen": ctrl.gen, "lba": p.lba}
        sim.fo_send("leg", self.nid, nid, {**body, "version": p.version})

    def _release(self, sim: FailoverSimulation, uuid: str, m: Mirror, lba: int, nid: int) -> None:
        """Leg `nid` is done with a write to `lba`: the next write held behind it goes out."""
        for wid, p in m.pending.items():
            if p.lba == lba and nid in p.held:
                if not m.behind(wid, p, nid, self.broken != "no_write_serialize"):
                    p.held.discard(nid)
                    self._send_leg(sim, uuid, m, wid, p, nid)
                return

    def _try_complete(self, sim: FailoverSimulation, uuid: str, m: Mirror, wid: int) -> None:
        p = m.pending[wid]
        if not m.completes(p):
            return
        del m.pending[wid]
        sim.log(f"n{self.nid} md: {uuid[-2:]} lba {p.lba} v{p.version} done on {sorted(p.acked_by)}")
        sim.fo_send("w_ok", self.nid, 0, {"vol": uuid, "attempt": p.attempt})

    def _write(self, sim: FailoverSimulation, frm: int, uuid: str, body: dict[str, Any], now: float) -> None:
        m = self.mirrors.get(uuid)
        if m is None or not m.front_open or m.stopped:
            sim.fo_send("w_no", self.nid, frm, {"vol": uuid, "attempt": body["attempt"]})
            return
        sim.dp.write(uuid, self.nid, body["lba"], body["version"], m.epoch, self.nid)
        self.wid += 1
        legs = m.members()
        m.written(body["lba"], legs)
        gens = {x: m.legs[x].ctrl.gen for x in legs}  # type: ignore[union-attr]
        p = Pending(body["lba"], body["version"], body["attempt"], now, set(legs), gens=gens)
        m.pending[self.wid] = p
        for x in legs:
            if m.behind(self.wid, p, x, self.broken != "no_write_serialize"):
                p.held.add(x)
                sim.stats["leg_writes_held"] += 1
            else:
                self._send_leg(sim, uuid, m, self.wid, p, x)
        self._try_complete(sim, uuid, m, self.wid)

    def _connected(
        self, sim: FailoverSimulation, uuid: str, m: Mirror, nid: int, gen: int, now: float
    ) -> None:
        """A (re)connect went through: a member's requeued I/O goes out on it; a leg that is not
        a member yet (new, or cut before) joins md and gets a copy: of the regions md's bitmap
        holds for it if it was in sync in this md before, else of all."""
        leg = m.legs[nid]
        ctrl = leg.ctrl
        if ctrl is None or ctrl.gen != gen or ctrl.state == "live":
            return
        ctrl.state, ctrl.since, ctrl.probe = "live", now, None
        if leg.state in MD_MEMBER:
            for wid, p in sorted(m.pending.items()):
                if nid in p.waiting:
                    p.gens[nid] = gen
                    if nid not in p.held:
                        self._send_leg(sim, uuid, m, wid, p, nid)
            return
        leg.state, leg.since = "syncing", now
        self._send_resync(sim, uuid, m, nid, gen)

    def _send_resync(self, sim: FailoverSimulation, uuid: str, m: Mirror, nid: int, gen: int) -> None:
        body: dict[str, Any] = {"vol": uuid, "epoch": m.epoch, "gen": gen}
        regions = resync_regions(m, nid)
        if regions is not None:
            body["lbas"] = [r * REGION_LBAS + i for r in regions for i in range(REGION_LBAS)]
        sim.fo_send("resync", self.nid, nid, body, data=True)

    def on_message(self, sim: FailoverSimulation, kind: str, frm: int, body: dict[str, Any]) -> None:
        now = sim.clock(self.nid)
        uuid = body.get("vol", "")
        m = self.mirrors.get(uuid)
        if kind == "write":
            self._write(sim, frm, uuid, body, now)
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
            if kind == "leg_no":
                self.not_live(m, frm, now)  # the target refused: reconnect, the I/O stays queued
                return
            p.waiting.discard(frm)
            p.acked_by.add(frm)
            self._release(sim, uuid, m, p.lba, frm)
            self._try_complete(sim, uuid, m, body["wid"])
        elif kind in ("ka", "sb"):
            ok = self._accepts(uuid, frm, body["epoch"], body["gen"])
            sim.fo_send(kind + ("_ok" if ok else "_no"), self.nid, frm, body, data=True)
        elif kind in ("sb_ok", "sb_no"):
            ctrl = m.legs[frm].ctrl if m is not None and frm in m.legs else None
            if m is None or ctrl is None or ctrl.gen != body["gen"] or m.sb.get(frm) is None:
                return
            if kind == "sb_no":
                self.not_live(m, frm, now)
                return
            del m.sb[frm]
            for wid in list(m.pending):
                self._try_complete(sim, uuid, m, wid)
        elif kind in ("ka_ok", "ka_no"):
            ctrl = m.legs[frm].ctrl if m is not None and frm in m.legs else None
            if m is not None and ctrl is not None and ctrl.gen == body["gen"] and ctrl.state == "live":
                ctrl.probe = None
                if kind == "ka_no":
                    self.not_live(m, frm, now)
        elif kind == "attach":
            if self._accepts(uuid, frm, body["epoch"]):
                # A new connection from the primary: the replica drops the older ones first,
                # so nothing queued on them can land after it (pitfall 1).
                self.conn[uuid] = body["gen"]
                sim.fo_send("attach_ok", self.nid, frm, body)
        elif kind == "attach_ok":
            if m is not None and m.epoch == body["epoch"] and frm in m.legs:
                self._connected(sim, uuid, m, frm, body["gen"], now)
        elif kind == "resync":
            if self._accepts(uuid, frm, body["epoch"], body["gen"]):
                # The copy, as one step when it lands: the dirty regions, or all.
                lbas = body.get("lbas")
                n = sim.dp.copy(uuid, frm, self.nid, body["epoch"], lbas)
                sim.stats["partial_resyncs" if lbas is not None else "rebuilds"] += 1
                sim.stats["partial_resync_lbas" if lbas is not None else "rebuild_lbas"] += n
                sim.fo_send("resync_done", self.nid, frm, body)
        elif kind == "resync_done":
            leg = m.legs.get(frm) if m is not None and m.epoch == body["epoch"] else None
            if (
                leg is not None
                and leg.state == "syncing"
                and leg.ctrl is not None
                and leg.ctrl.gen == body["gen"]
            ):
                leg.state, leg.since = "in-sync", now
                m.synced(frm)
                copied = len(body["lbas"]) if "lbas" in body else "all"
                sim.log(f"n{self.nid} md: leg n{frm} in-sync (epoch {body['epoch']}, copied: {copied})")

    def _accepts(self, uuid: str, frm: int, epoch: int, gen: int | None = None) -> bool:
        """Fence at the replica: only the primary its export follows, at that epoch (and for
        I/O, on the primary's latest connection). No export: nothing is taken."""
        if uuid in self.mirrors:
            return False  # it is a primary itself
        if uuid not in self.accept:
            return False  # the export is gone (deleted)
        if self.accept[uuid] != (frm, epoch):
            return self.broken == "no_epoch_check"
        return gen is None or self.conn.get(uuid) == gen
