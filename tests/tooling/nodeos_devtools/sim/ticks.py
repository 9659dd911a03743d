"""Logical clocks without idle tick events.

A node's tick only counts (election and heartbeat elapsed) until one of them reaches its
timeout; most ticks do nothing else. So instead of one event per node per tick, the
simulation schedules a wake-up at the first tick that can act, and before any input
reaches a node it applies the ticks that fell due meanwhile (each at its place in
time: ticks at or before now come before the input). Every input recomputes the wake-up,
because a message can reset a counter or change the role. With SimConfig.skip_idle_ticks
off, every tick is an event of its own (the reference behaviour).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeos.cluster.raft import ProgressState, StateRole

from .events import TICK
from .node import SimNode

if TYPE_CHECKING:
    from .cluster import Simulation


class TicksMixin:
    next_tick: dict[int, int]  # node -> virtual time of its next tick not applied yet
    wake_at: dict[int, int | None]  # node -> time of the wake-up event that counts

    def _clock_start(self: Simulation, n: SimNode, first_tick: int) -> None:
        self.next_tick[n.id] = first_tick
        self.wake_at[n.id] = None
        if not self.cfg.skip_idle_ticks:
            self._at(first_tick, TICK, (n.id, n.incarnation, first_tick))

    def _catch_up(self: Simulation, n: SimNode) -> None:
        """Apply the ticks that fell due up to now, before the node sees anything else."""
        if not self.cfg.skip_idle_ticks or n.rn is None:
            return
        nxt, now = self.next_tick[n.id], self.now
        if nxt > now:
            return
        step, tick = self.cfg.tick_ms, n.rn.tick
        while nxt <= now:
            tick()
            nxt += step
        self.next_tick[n.id] = nxt

    def _schedule_wake(self: Simulation, n: SimNode) -> None:
        if not self.cfg.skip_idle_ticks or n.rn is None:
            return
        cur, nxt = self.wake_at[n.id], self.next_tick[n.id]
        if cur is not None and cur <= nxt:
            return  # already woken at the very next tick: nothing can be earlier
        r = n.rn.raft
        if r.state is StateRole.LEADER:
            rc = r.cfg
            k = min(rc.heartbeat_tick - r.heartbeat_elapsed, rc.election_tick - r.election_elapsed)
            if rc.snapshot_retry_ticks:
                for pr in r.trk.progress.values():
                    if pr.state is ProgressState.SNAPSHOT:
                        k = 1  # snapshot retry counters move every tick
                        break
        elif r.promotable():
            k = r.randomized_election_timeout - r.election_elapsed
        else:
            return  # its ticks only count; an input that changes that reschedules
        wake = nxt + (max(k, 1) - 1) * self.cfg.tick_ms
        if cur is None or wake < cur:
            self.wake_at[n.id] = wake  # a later wake-up already queued is now stale
            self._at(wake, TICK, (n.id, n.incarnation, wake))

    def _on_tick(self: Simulation, payload: tuple[int, int, int]) -> None:
        nid, inc, t = payload
        n = self.nodes[nid]
        if not n.up or n.incarnation != inc or n.rn is None:
            return
        if not self.cfg.skip_idle_ticks:
            n.rn.tick()
            self._after_input(n)
            self._at(self.now + self.cfg.tick_ms, TICK, (nid, inc, self.now + self.cfg.tick_ms))
            return
        if self.wake_at[nid] != t:
            return  # superseded by an earlier wake-up
        self.wake_at[nid] = None
        self._catch_up(n)
        self._after_input(n)
