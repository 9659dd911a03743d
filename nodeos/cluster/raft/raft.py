"""The Raft core: a state machine stepped by messages and ticks. No I/O of any kind.

Section numbers refer to the Raft paper (Ongaro & Ousterhout, "In Search of an
Understandable Consensus Algorithm") and Ongaro's thesis (pre-vote 9.6, check-quorum
6.2, ReadIndex 6.4, leadership transfer 3.10, single-server changes 4.1).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from .leader import LeaderMixin
from .log import RaftLog
from .progress import Progress
from .quorum import VoteResult
from .read_only import ReadOnly
from .storage import Storage
from .tracker import ProgressTracker
from .types import (
    NONE,
    CompactedError,
    ConfChange,
    Config,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ProgressState,
    ProposalDropped,
    ReadState,
    Snapshot,
    SoftState,
    StateRole,
)

MT = MessageType
# Votes carry the campaign term; forwarded proposals/reads carry none (treated as local).
_OWN_TERM_EXEMPT = frozenset({MT.VOTE, MT.PRE_VOTE, MT.VOTE_RESP, MT.PRE_VOTE_RESP, MT.PROP, MT.READ_INDEX})
CAMPAIGN_TRANSFER = b"CampaignTransfer"  # vote context: a leader transfer, ignore the lease


class Raft(LeaderMixin):
    def __init__(self, cfg: Config, storage: Storage) -> None:
        cfg.validate()
        self.id = cfg.id
        self.cfg = cfg
        self.log = RaftLog(storage, cfg.max_committed_size_per_ready)
        hs, cs = storage.initial_state()
        self.trk = ProgressTracker(cfg.max_inflight_msgs)
        self.trk.reset_conf(cs, self.log.last_index() + 1)
        self.is_learner = self.id in self.trk.learners
        self.term = 0
        self.vote = NONE
        self.lead = NONE
        self.state = StateRole.FOLLOWER
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.lead_transferee = NONE
        self.pending_conf_index = 0
        self.read_only = ReadOnly()
        self.pending_read_index_messages: list[Message] = []
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.heartbeat_rounds = 0  # the leader's ticking rounds (staggers idle learners' beats)
        self.rng = random.Random(cfg.random_seed if cfg.random_seed is not None else cfg.id)
        self.randomized_election_timeout = cfg.election_tick
        # Deliberate bugs, switched on only by the simulator's self-test (sim/hooks.py) to
        # prove the invariant checks can fail. Never set in production code.
        self.test_commit_any_term = False
        self.test_vote_ignores_log = False
        self.test_pre_vote_bumps_term = False
        self.test_pre_vote_adopts_term = False
        if not hs.is_empty():
            self._load_hard_state(hs)
        if cfg.applied:
            self.log.applied_to(cfg.applied)
        self.become_follower(self.term, NONE)

    def _load_hard_state(self, hs: HardState) -> None:
        if hs.commit < self.log.committed or hs.commit > self.log.last_index():
            raise AssertionError(
                f"hard state commit {hs.commit} out of range [{self.log.committed}, {self.log.last_index()}]"
            )
        self.log.committed = hs.commit
        self.term = hs.term
        self.vote = hs.vote

    # --- derived state ---
    def soft_state(self) -> SoftState:
        return SoftState(self.lead, self.state)

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def conf_state(self) -> ConfState:
        return self.trk.conf_state()

    def promotable(self) -> bool:
        pr = self.trk.progress.get(self.id)
        return pr is not None and not pr.is_learner and not self.log.has_pending_snapshot()

    def _send(self, m: Message) -> None:
        term = m.term
        if term == 0 and m.type not in _OWN_TERM_EXEMPT:
            term = self.term
        frm = m.frm if m.frm != NONE else self.id
        if term != m.term or frm != m.frm:
            # Hand-built copy: dataclasses.replace is the hottest call in the simulator.
            m = Message(
                m.type, m.to, frm, term, m.log_term, m.index, m.entries, m.commit,
                m.reject, m.reject_hint, m.snapshot, m.context,
            )  # fmt: skip
        self.msgs.append(m)

    # --- role changes ---
    def _reset(self, term: int, leading: bool = False) -> None:
        if self.term != term:
            self.term = term
            self.vote = NONE
        self.lead = NONE
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        et = self.cfg.election_tick
        self.randomized_election_timeout = et + self.rng.randrange(et)
        self.lead_transferee = NONE
        self.trk.reset_votes()
        last = self.log.last_index()
        # Only a leader reads its peers' progress, and it starts every one afresh when it wins;
        # a follower or candidate renews its own entry only. With a thousand members, every
        # member renewing a thousand entries at every term change made an election O(n^2).
        renew = list(self.trk.progress.items()) if leading else [(self.id, self.trk.progress.get(self.id))]
        for nid, old in renew:
            if old is None:
                continue
            pr = Progress(last + 1, self.trk.max_inflight, is_learner=old.is_learner)
            if nid == self.id:
                pr.match = last
                pr.recent_active = True
            self.trk.progress[nid] = pr
        self.pending_conf_index = 0
        self.read_only = ReadOnly()
        self.pending_read_index_messages = []

    def become_follower(self, term: int, lead: int) -> None:
        self._reset(term)
        self.lead = lead
        self.state = StateRole.FOLLOWER

    def become_pre_candidate(self) -> None:
        if self.state is StateRole.LEADER:
            raise AssertionError("leader cannot become pre-candidate")
        # Pre-vote changes neither term nor vote (thesis 9.6).
        if self.test_pre_vote_bumps_term:
            self._reset(self.term + 1)
        self.trk.reset_votes()
        self.state = StateRole.PRE_CANDIDATE
        self.lead = NONE

    def become_candidate(self) -> None:
        if self.state is StateRole.LEADER:
            raise AssertionError("leader cannot become candidate")
        self._reset(self.term + 1)
        self.vote = self.id
        self.state = StateRole.CANDIDATE

    def become_leader(self) -> None:
        if self.state is StateRole.FOLLOWER:
            raise AssertionError("follower cannot become leader directly")
        self._reset(self.term, leading=True)
        self.lead = self.id
        self.state = StateRole.LEADER
        self.trk.progress[self.id].become_replicate()
        # No conf change until this term's first entry is applied: this closes the
        # single-server membership bug Ongaro described (raft-dev, 2015).
        self.pending_conf_index = self.log.last_index()
        # An empty entry of the new term commits everything before it (paper 5.4.2, 8).
        self._append_entries([Entry(0, 0)])

    # --- ticks ---
    def tick(self) -> None:
        if self.state is StateRole.LEADER:
            self._tick_heartbeat()
        else:
            self._tick_election()

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.promotable() and self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self.step(Message(MT.HUP, frm=self.id))

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_tick:
            self.election_elapsed = 0
            if self.cfg.check_quorum:
                self.step(Message(MT.CHECK_QUORUM, frm=self.id))
            # A transfer that did not finish within an election timeout is abandoned.
            if self.state is StateRole.LEADER and self.lead_transferee != NONE:
                self.lead_transferee = NONE
        if self.state is not StateRole.LEADER:
            return
        retry = self.cfg.snapshot_retry_ticks
        if retry:
            for pr in self.trk.progress.values():
                if pr.state is ProgressState.SNAPSHOT:
                    pr.snapshot_ticks += 1
                    if pr.snapshot_ticks >= retry:
                        pr.become_probe()  # the snapshot or its answer was lost; probe again
        if self.heartbeat_elapsed >= self.cfg.heartbeat_tick:
            self.heartbeat_elapsed = 0
            self.step(Message(MT.BEAT, frm=self.id))

    # --- elections ---
    def _pending_conf_unapplied(self) -> bool:
        lo, hi = self.log.applied + 1, self.log.committed + 1
        if lo >= hi:
            return False
        try:
            ents = self.log.slice(lo, hi, None)
        except CompactedError:
            return False
        return any(e.type is EntryType.CONF_CHANGE for e in ents)

    def _hup(self, transfer: bool) -> None:
        if self.state is StateRole.LEADER or not self.promotable():
            return
        if self._pending_conf_unapplied():
            # Campaigning with a membership change committed but not applied could use
            # the wrong quorum; wait until the application caught up.
            return
        if self.cfg.pre_vote and not transfer:
            self.campaign(pre=True, transfer=False)
        else:
            self.campaign(pre=False, transfer=transfer)

    def campaign(self, *, pre: bool, transfer: bool) -> None:
        if not self.promotable():
            return
        if pre:
            self.become_pre_candidate()
            vote_type, term = MT.PRE_VOTE, self.term + 1
        else:
            self.become_candidate()
            vote_type, term = MT.VOTE, self.term
        resp_type = MT.PRE_VOTE_RESP if pre else MT.VOTE_RESP
        if self._poll(self.id, resp_type, True) is VoteResult.WON:
            # Single-voter cluster: won at once.
            if pre:
                self.campaign(pre=False, transfer=transfer)
            else:
                self.become_leader()
            return
        ctx = CAMPAIGN_TRANSFER if transfer else b""
        li, lt = self.log.last_index(), self.log.last_term()
        for nid in sorted(self.trk.voters):
            if nid == self.id:
                continue
            self._send(Message(vote_type, to=nid, term=term, index=li, log_term=lt, context=ctx))

    def _poll(self, nid: int, t: MessageType, granted: bool) -> VoteResult:
        self.trk.record_vote(nid, granted)
        return self.trk.tally_votes()[2]

    # --- step ---
    def step(self, m: Message) -> None:
        if m.term == 0:
            pass  # local message
        elif m.term > self.term:
            if m.type in (MT.VOTE, MT.PRE_VOTE):
                force = m.context == CAMPAIGN_TRANSFER
                in_lease = (
                    self.cfg.check_quorum
                    and self.lead != NONE
                    and self.election_elapsed < self.cfg.election_tick
                )
                if not force and in_lease:
                    # We heard from a leader within the minimum election timeout: a
                    # disruptive candidate (e.g. a removed or partitioned node) is ignored.
                    return
            if m.type is MT.PRE_VOTE and not self.test_pre_vote_adopts_term:
                pass  # never change term on a pre-vote
            elif m.type is MT.PRE_VOTE_RESP and not m.reject:
                pass  # the term is bumped when the pre-vote wins
            elif m.type in (MT.APP, MT.HEARTBEAT, MT.SNAP):
                self.become_follower(m.term, m.frm)
            else:
                self.become_follower(m.term, NONE)
        elif m.term < self.term:
            if (self.cfg.check_quorum or self.cfg.pre_vote) and m.type in (MT.HEARTBEAT, MT.APP):
                # A stale leader (e.g. back from a partition) learns our term and steps down.
                self._send(Message(MT.APP_RESP, to=m.frm))
            elif m.type is MT.PRE_VOTE:
                self._send(Message(MT.PRE_VOTE_RESP, to=m.frm, term=self.term, reject=True))
            return

        if m.type is MT.HUP:
            self._hup(transfer=False)
        elif m.type in (MT.VOTE, MT.PRE_VOTE):
            can_vote = (
                self.vote == m.frm
                or (self.vote == NONE and self.lead == NONE)
                or (m.type is MT.PRE_VOTE and m.term > self.term)
            )
            resp = MT.VOTE_RESP if m.type is MT.VOTE else MT.PRE_VOTE_RESP
            if can_vote and (self.test_vote_ignores_log or self.log.is_up_to_date(m.index, m.log_term)):
                self._send(Message(resp, to=m.frm, term=m.term))
                if m.type is MT.VOTE:
                    self.election_elapsed = 0
                    self.vote = m.frm
            else:
                self._send(Message(resp, to=m.frm, term=self.term, reject=True))
        elif self.state is StateRole.LEADER:
            self._step_leader(m)
        elif self.state in (StateRole.CANDIDATE, StateRole.PRE_CANDIDATE):
            self._step_candidate(m)
        else:
            self._step_follower(m)

    def _drop(self, m: Message, why: str) -> None:
        """Refuse a local request loudly; a peer's forwarded one is dropped silently."""
        if m.to == NONE:  # created by this node's RawNode, not forwarded by a peer
            raise ProposalDropped(why)

    # --- candidate ---
    def _step_candidate(self, m: Message) -> None:
        my_resp = MT.PRE_VOTE_RESP if self.state is StateRole.PRE_CANDIDATE else MT.VOTE_RESP
        t = m.type
        if t is MT.PROP:
            return self._drop(m, "no leader")
        if t is MT.READ_INDEX:
            return self._drop(m, "no leader")
        if t is MT.APP:
            self.become_follower(m.term, m.frm)
            self._handle_append(m)
        elif t is MT.HEARTBEAT:
            self.become_follower(m.term, m.frm)
            self._handle_heartbeat(m)
        elif t is MT.SNAP:
            self.become_follower(m.term, m.frm)
            self._handle_snapshot(m)
        elif t is my_resp:
            res = self._poll(m.frm, t, not m.reject)
            if res is VoteResult.WON:
                if self.state is StateRole.PRE_CANDIDATE:
                    self.campaign(pre=False, transfer=False)
                else:
                    self.become_leader()
                    self._bcast_append()
            elif res is VoteResult.LOST:
                self.become_follower(self.term, NONE)

    # --- follower ---
    def _step_follower(self, m: Message) -> None:
        t = m.type
        if t is MT.PROP:
            if self.lead == NONE:
                return self._drop(m, "no leader")
            self._send(_with(m, to=self.lead, frm=self.id if m.frm == NONE else m.frm))
        elif t is MT.APP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_append(m)
        elif t is MT.HEARTBEAT:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_heartbeat(m)
        elif t is MT.SNAP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_snapshot(m)
        elif t is MT.TRANSFER_LEADER:
            if self.lead != NONE:
                self._send(_with(m, to=self.lead))
        elif t is MT.TIMEOUT_NOW:
            self._hup(transfer=True)
        elif t is MT.READ_INDEX:
            if self.lead == NONE:
                return self._drop(m, "no leader")
            self._send(_with(m, to=self.lead, frm=self.id if m.frm == NONE else m.frm))
        elif t is MT.READ_INDEX_RESP:
            self.read_states.append(ReadState(m.index, m.context))

    def _handle_append(self, m: Message) -> None:
        if m.index < self.log.committed:
            self._send(Message(MT.APP_RESP, to=m.frm, index=self.log.committed))
            return
        last_new = self.log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if last_new is not None:
            self._send(Message(MT.APP_RESP, to=m.frm, index=last_new))
            return
        # Rejection with a hint lets the leader skip a whole term per round trip.
        hint_index = min(m.index, self.log.last_index())
        hint_index, hint_term = self.log.find_conflict_by_term(hint_index, m.log_term)
        self._send(
            Message(
                MT.APP_RESP, to=m.frm, index=m.index, reject=True, reject_hint=hint_index, log_term=hint_term
            )
        )

    def _handle_heartbeat(self, m: Message) -> None:
        self.log.commit_to(m.commit)
        self._send(Message(MT.HEARTBEAT_RESP, to=m.frm, context=m.context))

    def _handle_snapshot(self, m: Message) -> None:
        assert m.snapshot is not None
        if self._restore(m.snapshot):
            self._send(Message(MT.APP_RESP, to=m.frm, index=self.log.last_index()))
        else:
            self._send(Message(MT.APP_RESP, to=m.frm, index=self.log.committed))

    def _restore(self, s: Snapshot) -> bool:
        if s.index <= self.log.committed:
            return False
        cs = s.meta.conf_state
        # A snapshot may predate our own addition (a joining node gets the leader's latest
        # snapshot, e.g. the bootstrap one); the change that added us follows in the log.
        if self.log.match_term(s.index, s.term):
            # We already have the entry: just fast-forward the commit index.
            self.log.commit_to(s.index)
            return False
        self.log.restore(s)
        self.trk.reset_conf(cs, self.log.last_index() + 1)
        pr = self.trk.progress.get(self.id)
        if pr is not None:
            pr.maybe_update(self.log.last_index())
        self.is_learner = self.id in self.trk.learners
        return True

    # --- membership (applied by the application when a conf change entry is applied) ---
    def apply_conf_change(self, cc: ConfChange) -> ConfState:
        self.trk.apply_conf_change(cc, self.log.last_index() + 1)
        if self.lead_transferee != NONE and self.lead_transferee not in self.trk.voters:
            self.lead_transferee = NONE
        self.is_learner = self.id in self.trk.learners
        removed = self.id not in self.trk.progress
        if self.state is StateRole.LEADER:
            if (removed or self.is_learner) and self.cfg.step_down_on_removal:
                self.become_follower(self.term, NONE)
            elif self.trk.voters:
                if self._maybe_commit():
                    self._bcast_append()
                else:
                    for nid in sorted(self.trk.progress):
                        if nid != self.id:
                            self._send_append(nid, send_if_empty=False)
        return self.trk.conf_state()


def _with(m: Message, **kw: Any) -> Message:
    return replace(m, **kw)
