"""What the leader knows about one follower's log (etcd's tracker.Progress + Inflights)."""

from __future__ import annotations

from collections import deque

from .types import ProgressState


class Inflights:
    """Last indexes of appends sent but not acknowledged, bounded for flow control."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._q: deque[int] = deque()

    def add(self, index: int) -> None:
        if self.full():
            raise AssertionError("inflights: add to a full window")
        self._q.append(index)

    def free_le(self, index: int) -> None:
        """Free every append up to `index` (the follower acknowledged it)."""
        q = self._q
        while q and q[0] <= index:
            q.popleft()

    def free_first_one(self) -> None:
        if self._q:
            self._q.popleft()

    def full(self) -> bool:
        return len(self._q) >= self.size

    def count(self) -> int:
        return len(self._q)

    def reset(self) -> None:
        self._q.clear()


class Progress:
    def __init__(self, next_index: int, inflight: int, *, is_learner: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        # In PROBE: one append was sent and we wait for its answer (or a heartbeat reply).
        self.probe_sent = False
        self.pending_snapshot = 0
        self.snapshot_ticks = 0  # ticks spent in SNAPSHOT without news
        self.recent_active = False
        self.commit_sent = 0  # the highest commit index this follower was told it may apply
        self.is_learner = is_learner
        self.inflights = Inflights(inflight)

    def __repr__(self) -> str:
        return f"Progress(match={self.match}, next={self.next}, {self.state.value})"

    def _reset_state(self, state: ProgressState) -> None:
        self.probe_sent = False
        self.pending_snapshot = 0
        self.snapshot_ticks = 0
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(ProgressState.PROBE)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset_state(ProgressState.PROBE)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        self._reset_state(ProgressState.REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def maybe_update(self, n: int) -> bool:
        """The follower has everything up to n. False if that is old news."""
        updated = False
        if self.match < n:
            self.match = n
            updated = True
            self.probe_sent = False
        self.next = max(self.next, n + 1)
        return updated

    def sent_entries(self, last_index: int | None) -> None:
        """An append went out (last_index None when it carried no entries)."""
        if self.state is ProgressState.REPLICATE:
            if last_index is not None:
                self.next = last_index + 1  # optimistic: pipeline the next batch now
                self.inflights.add(last_index)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """The follower rejected an append at prev index `rejected`. False if stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False  # answer to an older probe
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return self.inflights.full()
        return True
