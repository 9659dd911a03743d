"""Simulated network (a fake, by design: only the simulator uses it).

Every message gets a seeded delay, so messages reorder; some are dropped or duplicated;
partitions block (directed) links both when a message is sent and when it arrives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class NetworkFaults:
    drop: float = 0.0  # probability a message is lost
    duplicate: float = 0.0  # probability a message is delivered twice
    min_delay: int = 1  # virtual ms
    max_delay: int = 5
    slow: float = 0.0  # probability of a long delay (up to slow_delay)
    slow_delay: int = 60
    reorder: bool = True  # False: each link is FIFO, like one TCP connection


@dataclass
class SimNetwork:
    rng: random.Random
    faults: NetworkFaults = field(default_factory=NetworkFaults)
    blocked: set[tuple[int, int]] = field(default_factory=set)  # (from, to) links that are cut
    _last: dict[tuple[int, int], int] = field(default_factory=dict)  # FIFO: last arrival per link

    def cut(self, a: int, b: int) -> None:
        self.blocked.add((a, b))
        self.blocked.add((b, a))

    def partition(self, side_a: list[int], side_b: list[int]) -> None:
        for a in side_a:
            for b in side_b:
                self.cut(a, b)

    def heal(self) -> None:
        self.blocked.clear()

    def can_pass(self, frm: int, to: int) -> bool:
        return (frm, to) not in self.blocked

    def arrivals(self, now: int, frm: int, to: int) -> list[int]:
        """Arrival times of one message sent at `now`: [] when lost, two when duplicated.
        (Each delay is randint(min_delay, max_delay), plus randint(0, slow_delay) when slow, drawn
        through `_randbelow` as randint draws: this runs for every message.)"""
        if (frm, to) in self.blocked:
            return []
        f = self.faults
        r = self.rng
        if f.drop and r.random() < f.drop:
            return []
        dup = bool(f.duplicate) and r.random() < f.duplicate
        lo, width = f.min_delay, f.max_delay - f.min_delay + 1
        d = lo + r._randbelow(width)  # = r.randint(lo, max_delay), the same draw
        if f.slow and r.random() < f.slow:
            d += r._randbelow(f.slow_delay + 1)
        if not dup:
            out = [now + d]
        else:
            d2 = lo + r._randbelow(width)
            if f.slow and r.random() < f.slow:
                d2 += r._randbelow(f.slow_delay + 1)
            out = [now + d, now + d2]
        if not f.reorder:
            last = self._last.get((frm, to), 0)
            out = [max(t, last) for t in out]
            self._last[(frm, to)] = max(out)
        return out
