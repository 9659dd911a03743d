"""Which members vote (pure): the membership, labels and liveness in, at most one change out.

A cluster of any size keeps `voters` Raft voters (3 by default, 5 when asked: `nodeos cluster
set voters 3|5`); every other member is a learner that receives the map. The leader calls
`plan()` every tick and carries out the change it returns, one membership change at a time.

The spread. Voters go on distinct failure domains at the highest level that has enough of
them: `switch`, then `rack` (the node labels of those names, as replica placement reads them),
then `node`. A level has enough when at least `target` distinct values of its label exist
among the members; the level is chosen from the labels alone, never from who is up, so a lost
rack does not change the level and a returning one does not flip it back. Within the level
the candidate on a domain no voter holds comes first, then the one sharing the fewest
higher-level domains with the voters (at `node` level: another rack, another switch), then the
lowest node id: the answer depends only on the input.

The rules, in order (the first that applies gives the change):
1. grow: fewer healthy voters than the target and a caught-up learner in contact: promote the
   best one. A voter silent for `down_after_s` (the leader has not heard from it) or draining
   is not healthy: its replacement comes in first;
2. shrink what was lost: more voters than the target and one of them not healthy: demote it
   (to a learner; it stays a member and catches up when it returns);
3. rebalance: every voter healthy, the set full, two voters sharing a domain, and a caught-up
   learner on a domain no voter holds: promote it (rule 4 then demotes one of the two). A
   returning domain so costs one swap when the set was squeezed, and nothing when it was not;
4. shrink the surplus: more voters than the target: demote the one that shares the most;
5. a draining leader hands leadership to a healthy voter (so it can go, or be demoted).
A leader never demotes itself: where rule 2 or 4 names it, it transfers leadership first.
No change is made that would leave fewer voters in contact than a majority of the new set, and
none removes a voter before its replacement is in (the count never drops below the target).

The target is `min(voters, members)`: a cluster of one has one voter, of two two, of three
three; a draining member still counts (it may keep its vote until a replacement exists).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LEVELS = ("switch", "rack", "node")
ALLOWED_VOTERS = (3, 5)
DEFAULT_VOTERS = 3
DEFAULT_DOWN_AFTER_S = 30.0
DOWN_AFTER_RANGE = (2.0, 3600.0)


@dataclass(frozen=True, slots=True)
class Member:
    """One Raft member as the leader sees it."""

    node_id: int
    name: str
    labels: Mapping[str, str]
    voter: bool
    draining: bool = False
    active: bool = True  # the leader heard from it within the last election timeout
    silent_s: float = 0.0  # how long the leader has not heard from it (0: just now)
    caught_up: bool = True  # its log is within a few entries of the commit index


@dataclass(frozen=True, slots=True)
class Policy:
    voters: int = DEFAULT_VOTERS
    down_after_s: float = DEFAULT_DOWN_AFTER_S


@dataclass(frozen=True, slots=True)
class Change:
    kind: str  # "promote" | "demote" | "transfer" (leadership, to node_id)
    node_id: int
    reason: str


@dataclass(frozen=True)
class Plan:
    level: str
    level_why: str
    target: int
    domains: dict[int, str]  # every member -> its domain at `level`
    reasons: dict[int, str]  # every voter -> why it votes (or why it is being replaced)
    change: Change | None = None
    lost: tuple[int, ...] = field(default=())


def domain_of(m: Member, level: str) -> str:
    """As replica placement names domains: the node's name, or the label's value, or
    `node:<name>` for a node without the label (a domain of its own)."""
    if level == "node":
        return m.name
    value = m.labels.get(level)
    return value if value else f"node:{m.name}"


def choose_level(members: Iterable[Member], target: int) -> tuple[str, str]:
    """(level, why): the highest level with at least `target` labelled domains."""
    counts: list[str] = []
    ms = list(members)
    for level in LEVELS[:-1]:
        values = {m.labels.get(level) for m in ms if m.labels.get(level)}
        if len(values) >= target:
            return level, f"{len(values)} {_plural(level)}"
        counts.append(f"{len(values)} labelled {_plural(level)}")
    return "node", f"{len(ms)} members; {' and '.join(counts)}, fewer than {target}"


def _plural(level: str) -> str:
    return "switches" if level == "switch" else f"{level}s"


class _View:
    """The members with what every rule asks of them, computed once."""

    def __init__(self, members: Sequence[Member], leader: int, policy: Policy) -> None:
        self.by_id = {m.node_id: m for m in members}
        self.leader = leader
        self.policy = policy
        self.target = max(1, min(policy.voters, len(members)))
        self.level, self.level_why = choose_level(members, self.target)
        self.domain = {m.node_id: domain_of(m, self.level) for m in members}
        self.higher = [lv for lv in LEVELS[: LEVELS.index(self.level)]][::-1]  # rack before switch
        self.voters = sorted(m.node_id for m in members if m.voter)
        self.lost = [v for v in self.voters if self.is_lost(self.by_id[v])]
        self.healthy = [v for v in self.voters if v not in self.lost]
        self.active_voters = sum(1 for v in self.voters if self.is_active(self.by_id[v]))

    def is_active(self, m: Member) -> bool:
        return m.node_id == self.leader or m.active

    def is_lost(self, m: Member) -> bool:
        if m.node_id == self.leader:
            return m.draining  # it is in contact with itself; draining is its only way out
        return m.draining or m.silent_s >= self.policy.down_after_s

    def candidates(self) -> list[Member]:
        return [
            m
            for m in self.by_id.values()
            if not m.voter and not m.draining and self.is_active(m) and m.caught_up
        ]

    def sharing(self, nid: int, among: Iterable[int]) -> tuple[int, int]:
        """(voters of `among` on nid's domain, voters sharing a higher-level domain with it)."""
        m = self.by_id[nid]
        same = 0
        higher = 0
        for v in among:
            if v == nid:
                continue
            o = self.by_id[v]
            if self.domain[v] == self.domain[nid]:
                same += 1
            higher += sum(1 for lv in self.higher if m.labels.get(lv) and o.labels.get(lv) == m.labels[lv])
        return same, higher

    def best_candidate(self, keep: Sequence[int]) -> Member | None:
        cands = self.candidates()
        if not cands:
            return None
        # At equal spread, not on a lost voter's domain: what took one voter may take another.
        lost_domains = {self.domain[n] for n in self.lost}
        return min(
            cands,
            key=lambda m: (*self.sharing(m.node_id, keep), self.domain[m.node_id] in lost_domains, m.node_id),
        )

    def worst_voter(self, among: Sequence[int]) -> int:
        # Shares most; at equal sharing, not the leader (it would have to hand over), then
        # the highest id (the most recently added, usually).
        return max(among, key=lambda v: (*self.sharing(v, among), v != self.leader, v))

    def shared_domains(self, voters: Sequence[int]) -> bool:
        return len({self.domain[v] for v in voters}) < len(voters)

    def majority_after(self, active_after: int, size_after: int) -> bool:
        return active_after >= size_after // 2 + 1

    def transfer_target(self, excluding: int) -> int | None:
        ok = [
            v
            for v in self.healthy
            if v != excluding and self.is_active(self.by_id[v]) and self.by_id[v].caught_up
        ]
        return min(ok, key=lambda v: (*self.sharing(v, self.healthy), v)) if ok else None


def _lost_why(v: _View, nid: int) -> str:
    m = v.by_id[nid]
    if m.draining:
        return f"node {nid} is draining"
    return f"node {nid} silent for {m.silent_s:.0f} s (bound {v.policy.down_after_s:.0f} s)"


def _demote_or_transfer(v: _View, victim: int, reason: str) -> Change | None:
    m = v.by_id[victim]
    if victim == v.leader:
        to = v.transfer_target(victim)
        if to is None:
            return None
        return Change("transfer", to, f"leader {victim} hands over before it is demoted: {reason}")
    active_after = v.active_voters - (1 if v.is_active(m) else 0)
    if not v.majority_after(active_after, len(v.voters) - 1):
        return None
    return Change("demote", victim, reason)


def _decide(v: _View) -> Change | None:
    cand = v.best_candidate(v.healthy)
    can_grow = cand is not None and v.majority_after(v.active_voters + 1, len(v.voters) + 1)
    # 1. grow: a replacement (or a first voter) comes in before anything leaves.
    if cand is not None and can_grow and len(v.healthy) < v.target:
        why = (
            f"replaces {', '.join(_lost_why(v, n) for n in v.lost)}"
            if v.lost
            else f"the voter set has {len(v.voters)} of {v.target}"
        )
        return Change("promote", cand.node_id, f"{v.level} {v.domain[cand.node_id]}: {why}")
    # 2. the lost go once the set is over its target (their replacements are in).
    if v.lost and len(v.voters) > v.target:
        victim = max(v.lost, key=lambda n: (v.by_id[n].draining is False, v.by_id[n].silent_s, n))
        return _demote_or_transfer(v, victim, f"{_lost_why(v, victim)}; its replacement votes")
    # 3. rebalance, only onto a domain that holds no voter (else nothing gains): a squeezed
    # set takes one swap when a domain returns, a spread one none.
    if (
        cand is not None
        and can_grow
        and not v.lost
        and len(v.voters) == v.target
        and v.shared_domains(v.voters)
        and v.domain[cand.node_id] not in {v.domain[x] for x in v.voters}
    ):
        why = f"{v.level} {v.domain[cand.node_id]} holds no voter while voters share a {v.level}"
        return Change("promote", cand.node_id, why)
    # 4. the surplus (a rebalance's second half, or `cluster set voters` lowered).
    if len(v.voters) > v.target and not v.lost:
        victim = v.worst_voter(v.voters)
        same, _ = v.sharing(victim, v.voters)
        why = (
            f"shares {v.level} {v.domain[victim]} with another voter"
            if same
            else f"{len(v.voters)} voters, {v.target} wanted"
        )
        return _demote_or_transfer(v, victim, why)
    # 5. a draining leader hands over even when no replacement exists yet.
    if v.by_id[v.leader].draining:
        to = v.transfer_target(v.leader)
        if to is not None:
            return Change("transfer", to, f"leader {v.leader} is draining")
    return None


def _reasons(v: _View) -> dict[int, str]:
    out: dict[int, str] = {}
    for nid in v.voters:
        if nid in v.lost:
            out[nid] = f"{_lost_why(v, nid)}: to be replaced by a member of another {v.level}"
            continue
        others = [o for o in v.voters if o != nid and v.domain[o] == v.domain[nid]]
        where = f"{v.level} {v.domain[nid]}"
        if not others:
            out[nid] = f"{where}: the only voter there"
        else:
            out[nid] = (
                f"{where}: shared with voter{'s' if len(others) > 1 else ''} "
                f"{', '.join(map(str, others))} (no caught-up member in contact on another {v.level})"
            )
    return out


def plan(members: Sequence[Member], leader: int, policy: Policy = Policy()) -> Plan:
    """The level, the reasons and at most one change. `leader` must be among `members`."""
    v = _View(members, leader, policy)
    change = _decide(v) if leader in v.by_id else None
    level_why = f"spread by {v.level}: {v.level_why}"
    return Plan(v.level, level_why, v.target, v.domain, _reasons(v), change, tuple(v.lost))


def members_from(
    progress: Mapping[int, Any],
    voters: Iterable[int],
    learners: Iterable[int],
    nodes: Mapping[int, Mapping[str, Any]],
    silent_s: Mapping[int, float],
    caught_up: Mapping[int, bool],
) -> list[Member]:
    """Members from the leader's Raft progress (ProgressStatus per id) and the map's nodes."""
    out: list[Member] = []
    vs = set(voters)
    for nid in sorted(vs | set(learners)):
        node = nodes.get(nid) or {}
        pr = progress.get(nid)
        out.append(
            Member(
                node_id=nid,
                name=str(node.get("name") or f"node-{nid}"),
                labels={k: str(x) for k, x in (node.get("labels") or {}).items()},
                voter=nid in vs,
                draining=node.get("state") == "draining",
                active=bool(pr is not None and pr.recent_active),
                silent_s=float(silent_s.get(nid, 0.0)),
                caught_up=bool(caught_up.get(nid, False)),
            )
        )
    return out


def check_policy_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """`cluster set`'s arguments, checked (BadInput names the field and what it allows)."""
    from nodeos.errors import BadInput

    out: dict[str, Any] = {}
    if not args or not set(args) <= {"voters", "voter_down_s"}:
        raise BadInput("give voters and/or voter_down_s", field="setting", allowed=["voters", "voter_down_s"])
    if "voters" in args:
        n = args["voters"]
        if type(n) is not int or n not in ALLOWED_VOTERS:
            raise BadInput(f"voters {n!r} is not allowed", field="voters", allowed=list(ALLOWED_VOTERS))
        out["voters"] = n
    if "voter_down_s" in args:
        s = args["voter_down_s"]
        lo, hi = DOWN_AFTER_RANGE
        if not isinstance(s, (int, float)) or isinstance(s, bool) or not lo <= s <= hi:
            raise BadInput(
                f"voter_down_s {s!r} is not a number of seconds in [{lo:g}, {hi:g}]",
                field="voter_down_s",
                allowed=f"{lo:g}-{hi:g}",
            )
        out["voter_down_s"] = float(s)
    return out


def policy_of(st: Mapping[str, Any]) -> Policy:
    """The policy the map holds (the `settings` section; absent: the defaults)."""
    s = st.get("settings") or {}
    return Policy(int(s.get("voters", DEFAULT_VOTERS)), float(s.get("voter_down_s", DEFAULT_DOWN_AFTER_S)))


def cluster_set_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Map command `cluster_set`: the voter count and the bound after which a voter is lost."""
    from nodeos.cluster import events as map_events

    new = check_policy_args(args)
    cur = dict(st.get("settings") or {})
    cur.update(new)
    st["settings"] = cur
    p = policy_of(st)
    map_events.record(
        st, "voters_set", f"voters {p.voters}; a voter silent for {p.down_after_s:g} s is replaced"
    )
    return {"voters": p.voters, "voter_down_s": p.down_after_s}


HANDLERS = {"cluster_set": {1: cluster_set_v1}}
