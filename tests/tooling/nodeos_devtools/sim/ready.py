"""A node's Ready, handled as the daemon's driver handles it (nodeos/cluster/driver.py).

After every input the invariants are checked on the node's new state and its next Ready starts
syncing: a leader's appends and heartbeats leave at once, the rest only after the synced write
(`rawnode.split_messages`); then the committed entries are applied (and the map, when the seed
runs one), ReadIndex reads finish, and the log is compacted behind a snapshot. Messages travel
through the simulated network and are delivered as events. Part of Simulation (cluster.py).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from nodeos.cluster.raft import Message, MessageType, StateRole, from_wire, split_messages, to_wire

from .config import msg_summary
from .events import CRASH, DELIVER, SYNC
from .mapcheck import before
from .node import SimNode

if TYPE_CHECKING:
    from .cluster import Simulation


class ReadyMixin:
    def _after_input(self: Simulation, n: SimNode) -> None:
        """Check invariants on the node's new state and start syncing its next Ready."""
        rn = n.rn
        assert rn is not None
        r = rn.raft
        state, committed = r.state, r.log.committed
        if state is StateRole.LEADER and self.check.leader_elected(n.id, r):
            self.stats["elections"] += 1
            self.log(f"n{n.id} is leader of term {r.term} (last index {r.log.last_index()})")
            if self.now < self.cfg.duration_ms and self.rng.random() < self.crash_new_leader:
                self._at(self.now + self.rng.randint(0, 8), CRASH, (n.id, n.incarnation))
        elif state is not n.last_role and self.cfg.trace:
            self.log(f"n{n.id} {n.last_role.value} -> {state.value} term {r.term}")
        if committed > n.last_commit:
            if state is StateRole.LEADER and n.last_role is StateRole.LEADER and n.last_term == r.term:
                self.check.leader_counted(n.id, r, committed)
                if self.now < self.cfg.duration_ms and self.rng.random() < self.crash_after_commit:
                    self._at(self.now + self.rng.randint(0, 4), CRASH, (n.id, n.incarnation))
            self.check.commit_advanced(n.id, r, n.last_commit, committed)
        n.last_role = state
        n.last_term = r.term
        n.last_commit = committed
        if n.syncing is not None and self.cfg.broken != "send_before_sync" and r.msgs:
            self._send_all(n, rn.take_messages_before_sync())  # as the driver's _pump does
        if n.syncing is None and rn.has_ready():
            rd = rn.ready()
            n.syncing = rd
            # As the daemon's driver does: a leader's appends and heartbeats leave before the
            # write, everything that promises something waits for it (rawnode.split_messages).
            now, after_sync = split_messages(rd)
            if self.cfg.broken == "send_before_sync":  # acks and votes too: must be caught
                now, after_sync = rd.messages, []
            self._send_all(n, now)
            rd.messages = after_sync
            delay = self.rng.randint(0, self.disk_max_ms) if rd.must_sync else 0
            self._at(self.now + delay, SYNC, (n.id, n.incarnation))
        self._schedule_wake(n)

    def _sync(self: Simulation, n: SimNode) -> None:
        self._catch_up(n)
        rd = n.syncing
        rn = n.rn
        assert rd is not None and rn is not None
        # 1. one atomic, synced write: snapshot + entries + hard state. A commit-index-only
        # change is not written (the driver defers it to the next write; a crash loses it).
        if rd.must_sync:
            hs = rd.hard_state if rd.hard_state is not None else n.lazy_hard_state
            n.lazy_hard_state = None
            n.disk.persist(hs, rd.entries, rd.snapshot)
        elif rd.hard_state is not None:
            n.lazy_hard_state = rd.hard_state
        if rd.entries:
            prev = {e.index: e.term for e in rd.entries}
            first = rd.entries[0].index
            prev[first - 1] = n.disk.term(first - 1)
            self.check.persisted(n.id, rd.entries, prev)
        # 2. only now the messages leave
        self._send_all(n, rd.messages)
        # 3. apply
        if rd.snapshot is not None:
            n.restore_state(rd.snapshot.data, rd.snapshot.index)
            n.conf_state = rd.snapshot.meta.conf_state
            self.check.snapshot_restored(n.id, rd.snapshot, n.state)
            if n.cmap is not None:
                self.mapcheck.same_state(n.id, n.applied, n.cmap.state, "installing a snapshot at")
            self.log(f"n{n.id} restored snapshot at {rd.snapshot.index}")
        for e in rd.committed_entries:
            self.check.applied_entry(n.id, e)
            if n.cmap is not None and e.index > n.cmap.applied_index:  # as the driver skips replays
                old = before(n.cmap.state) if self.mapcheck.first_apply(e.index) else None
                cmd, rid, result = n.apply_map(e.index, e.type, e.data)
                self.mapcheck.applied(n.id, e.index, n.cmap.state, old, cmd, result, rid)
                self.mapcheck.pool_index(n.id, e.index, n.cmap)
                self.mapcheck.typed(n.id, e.index, n.cmap)
                self._map_applied(n)
            n.apply_entry_data(e.index, e.type, e.data)
            owner = self.proposer.get(e.data)
            if owner == (n.id, n.incarnation):
                del self.proposer[e.data]
                self.check.ack(e.data, e.index)
                if e.data == self.final_cmd:
                    self.final_index = e.index
                self.stats["acked"] += 1
                self.log(f"n{n.id} acknowledges {e.data!r} at index {e.index}")
        for rs in rd.read_states:
            pr = n.reads.get(rs.request_ctx)
            if pr is not None:
                pr.index = rs.index
        rn.advance(rd)
        n.syncing = None
        self._finish_reads(n)
        self._maybe_compact(n)
        if n.up:
            self._after_input(n)

    def _finish_reads(self: Simulation, n: SimNode) -> None:
        for ctx, pr in list(n.reads.items()):
            if pr.index >= 0 and n.applied >= pr.index:
                del n.reads[ctx]
                self.check.read_done(n.id, ctx, pr.issued_acked, n.state_set)
                self.stats["reads"] += 1

    def _maybe_compact(self: Simulation, n: SimNode) -> None:
        disk = n.disk
        if n.applied - disk.snapshot().index < self.compact_every:
            return
        data = n.snapshot_data()
        if n.cmap is not None:
            self.mapcheck.snapshot_round_trip(n.id, n.cmap.snapshot(), n.cmap.state)
        disk.create_snapshot(n.applied, n.conf_state, data)
        upto = n.applied - self.compact_keep
        if upto >= disk.first_index():
            disk.compact(upto)
        self.log(f"n{n.id} snapshot at {n.applied}, log compacted up to {upto}")

    def _send_all(self: Simulation, n: SimNode, msgs: list[Message]) -> None:
        if not msgs:
            return
        now, arrivals_of, events, push = self.now, self.net.arrivals, self._events, heapq.heappush
        for m in msgs:
            arrivals = arrivals_of(now, m.frm, m.to)
            if m.type is MessageType.SNAP:
                if not arrivals and self.rng.random() < 0.5 and n.rn is not None:
                    n.rn.report_snapshot(m.to, False)  # the transport noticed the failure
                self.stats["snapshots_sent"] += 1
            for t in arrivals:  # self._at(t, DELIVER, m)
                self._seq += 1
                push(events, (t, self._seq, DELIVER, m))

    def _deliver(self: Simulation, m: Message) -> None:
        n = self.nodes[m.to]
        if not n.up or not self.net.can_pass(m.frm, m.to):
            return
        assert n.rn is not None
        if self._seq % 4 == 0:
            m = from_wire(to_wire(m))  # exercise the wire codec on a share of the traffic
        if self.cfg.trace:
            self.log(f"deliver {msg_summary(m)}")
        self._catch_up(n)
        n.rn.step(m)
        self._after_input(n)
