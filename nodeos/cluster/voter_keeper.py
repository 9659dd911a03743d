"""The leader's shell around voters.plan: when it last heard from each member, and the plan.

Raft's progress says whether a member answered within the last election timeout
(`recent_active`, reset at every check-quorum round); how long one has been silent needs a
clock, which the pure plan never reads, so the keeper keeps the last moment each member was
active on the leader's monotonic clock. A new leader knows nothing older: it counts every
member from the moment it became leader, so a voter already dead is replaced `down_after_s`
after the election, not sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nodeos.cluster.map import encode_command
from nodeos.cluster.raft import ConfState, ProgressState, Status
from nodeos.cluster.raft_status import PROMOTE_WINDOW
from nodeos.cluster.voters import Change, Plan, Policy, members_from, plan


class VoterKeeper:
    def __init__(self) -> None:
        self.leading_since = 0.0
        self.last_seen: dict[int, float] = {}
        self.last_plan: Plan | None = None
        self.last_change: Change | None = None
        self.changes = 0  # membership changes and transfers this leader started (metrics, tests)
        self.notes: set[asyncio.Task[None]] = set()  # events being recorded (record_change)

    def became_leader(self, now: float) -> None:
        self.leading_since = now
        self.last_seen = {}
        self.last_plan = None

    def tick(
        self,
        st: Status,
        conf: ConfState,
        nodes: Mapping[int, Mapping[str, Any]],
        policy: Policy,
        now: float,
    ) -> Plan:
        commit = st.hard_state.commit
        silent: dict[int, float] = {}
        caught_up: dict[int, bool] = {}
        for nid, pr in st.progress.items():
            if pr.recent_active or nid == st.id:
                self.last_seen[nid] = now
            silent[nid] = max(0.0, now - self.last_seen.get(nid, self.leading_since))
            caught_up[nid] = nid == st.id or (
                pr.state is ProgressState.REPLICATE and pr.match > 0 and pr.match + PROMOTE_WINDOW >= commit
            )
        for gone in set(self.last_seen) - set(st.progress):
            del self.last_seen[gone]
        members = members_from(st.progress, conf.voters, conf.learners, nodes, silent, caught_up)
        self.last_plan = plan(members, st.id, policy)
        return self.last_plan

    def keep(self, task: asyncio.Task[None]) -> None:
        """Hold the task until it ends: the loop keeps only a weak reference to it."""
        self.notes.add(task)
        task.add_done_callback(self.notes.discard)

    def started(self, change: Change) -> None:
        self.last_change = change
        self.changes += 1

    def report(self, policy: Policy) -> dict[str, Any] | None:
        """What `cluster status` shows about the voter set (the leader's view)."""
        p = self.last_plan
        if p is None:
            return None
        return {
            "wanted": policy.voters,
            "target": p.target,
            "voter_down_s": policy.down_after_s,
            "level": p.level,
            "level_why": p.level_why,
            "reasons": {str(k): v for k, v in p.reasons.items()},
            "domains": {str(k): v for k, v in p.domains.items()},
            "lost": list(p.lost),
            "next": None if p.change is None else _change_dict(p.change),
            "last": None if self.last_change is None else _change_dict(self.last_change),
        }


def _change_dict(c: Change) -> dict[str, Any]:
    return {"kind": c.kind, "node_id": c.node_id, "reason": c.reason}


async def record_change(propose: Callable[..., Awaitable[Any]], ch: Change) -> None:
    """The change in the cluster's event log (`nodeos events`); losing it loses only the note."""
    verb = "promoted to voter" if ch.kind == "promote" else "demoted to learner"
    event = {"kind": "voter_changed", "message": f"node {ch.node_id} {verb}: {ch.reason}"}
    event |= {"node": ch.node_id, "step": ch.kind, "at": time.time()}
    with contextlib.suppress(Exception):  # a note: never a reason to fail
        await propose(encode_command("record_event", event), timeout=10.0)


def status_section(report: Mapping[str, Any] | None, conf: ConfState, policy: Policy) -> dict[str, Any]:
    """The `voters` section of `cluster status`: the leader's report (`report`), or, when the
    leader could not be asked, what the map and this member's membership say."""
    out: dict[str, Any] = {
        "wanted": policy.voters,
        "voter_down_s": policy.down_after_s,
        "voters": list(conf.voters),
        "learners": list(conf.learners),
        "level": None,
        "level_why": None,
        "lost": [],
        "next": None,
        "last": None,
    }
    if report:
        out.update({k: report.get(k) for k in ("level", "level_why", "next", "last")})
        out["lost"] = list(report.get("lost") or [])
    return out


def member_voting(nid: int, report: Mapping[str, Any] | None) -> dict[str, Any]:
    """A member's domain at the voters' level, and why it votes (voters only)."""
    if not report:
        return {"domain": None, "why": None}
    key = str(nid)
    return {"domain": (report.get("domains") or {}).get(key), "why": (report.get("reasons") or {}).get(key)}
