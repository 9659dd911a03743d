"""What one simulated run is given (SimConfig) and what it answers (SeedResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeos.cluster.raft import Message, MessageType


@dataclass
class SimConfig:
    nodes: int = 3
    duration_ms: int = 1500  # fault phase
    settle_ms: int = 5000  # deadline after the faults stop for a final command to commit
    tick_ms: int = 10
    election_tick: int = 10
    heartbeat_tick: int = 2
    broken: str | None = None  # a variant from hooks.BROKEN_VARIANTS (self-test only)
    trace: bool = False
    # "lmdb": every node's disk is the daemon's LmdbRaftStorage (on /dev/shm), closed and
    # reopened from its files at every crash; "logfile": the same with the daemon's Raft log
    # file (LogFileRaftStorage); "memory": a MemoryStorage (fast).
    storage: str = "memory"
    skip_idle_ticks: bool = True  # ticks.py: no event for a tick that only counts
    disrupt: bool = True  # run the disruption phase (disruption.py) after the final commit
    # Events one seed may use before it counts as a livelock (0: 100 per node per tick of
    # virtual time, ~100x what a healthy run needs).
    max_events: int = 0
    # "opaque": clients propose opaque commands; "map": real cluster-map commands decided by
    # the control plane's code, applied to every node's own ClusterMap (mapload.py, mapcheck.py).
    workload: str = "opaque"
    # Clients go on this long after the faults stopped (healed network, nodes restarted),
    # before the final command: map objects take several steps to get anywhere (-1: 1500 ms
    # for the map workload, none for the opaque one).
    calm_ms: int = -1
    # The failover workload's fault mix (failover_faults.py): "drain" (long faults that last,
    # drains, late reports, sparser Raft faults), "classic", the mix of issue 9, kept so the
    # seeds its regressions name still replay the same run, or "starved": the drain mix with
    # starved nodes (a node powered off, a primary's lease messages lost or late: issue 29).
    failover_faults: str = "drain"
    # The voters workload (voters_sim.py): members on this many racks (0: one rack per 25
    # members), and the voters the leader keeps.
    racks: int = 0
    voters: int = 3

    def client_ms(self) -> int:
        calm = self.calm_ms if self.calm_ms >= 0 else (1500 if self.workload == "map" else 0)
        return self.duration_ms + calm

    def event_budget(self) -> int:
        if self.max_events:
            return self.max_events
        return 100 * self.nodes * (self.duration_ms + self.settle_ms) // self.tick_ms


@dataclass
class SeedResult:
    seed: int
    ok: bool
    violation: str | None = None
    time_ms: int = 0
    trace: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


def msg_summary(m: Message) -> str:
    s = f"{m.type.name} {m.frm}->{m.to} term={m.term}"
    if m.type in (MessageType.APP, MessageType.VOTE, MessageType.PRE_VOTE):
        s += f" index={m.index} log_term={m.log_term}"
    if m.type is MessageType.APP_RESP:
        s += f" index={m.index}"
    if m.entries:
        s += f" entries={m.entries[0].index}..{m.entries[-1].index}"
    if m.commit:
        s += f" commit={m.commit}"
    if m.reject:
        s += f" REJECT hint={m.reject_hint}"
    if m.snapshot is not None:
        s += f" snapshot@{m.snapshot.index}/t{m.snapshot.term}"
    return s
