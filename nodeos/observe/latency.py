"""A fixed-bucket latency histogram with no dependencies, for code on hot paths (the Raft
driver) to record into; the exporter turns its snapshot into a Prometheus histogram."""

from __future__ import annotations

import bisect
from typing import Any

# Seconds: fsync on NVMe is ~0.1-1 ms, a commit across a LAN a few ms, a sick disk seconds.
BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip


class LatencyHistogram:
    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above the largest bound
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.sum += seconds

    def snapshot(self) -> dict[str, Any]:
        """{buckets: [(upper bound, cumulative count)], sum, count}; the last bound is +Inf."""
        out, acc = [], 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            acc += n
            out.append((bound, acc))
        return {"buckets": out, "sum": self.sum, "count": acc}
