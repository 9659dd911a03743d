"""Leader side of the Raft core: proposals, replication (paper 5.3), commit (5.4.2),
ReadIndex (thesis 6.4), leadership transfer (thesis 3.10). Mixed into Raft."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .quorum import VoteResult, vote_result
from .read_only import ReadIndexStatus
from .types import (
    NONE,
    CompactedError,
    Entry,
    EntryType,
    Message,
    MessageType,
    ProgressState,
    ProposalDropped,
    ReadState,
    SnapshotTemporarilyUnavailable,
    UnavailableError,
)

if TYPE_CHECKING:
    from .progress import Progress
    from .raft import Raft

MT = MessageType


class LeaderMixin:
    # --- leader ---
    def _step_leader(self: Raft, m: Message) -> None:
        t = m.type
        if t is MT.BEAT:
            self.heartbeat_rounds += 1
            self._bcast_heartbeat()
            return
        if t is MT.CHECK_QUORUM:
            if not self.trk.quorum_active(self.id):
                self.become_follower(self.term, NONE)
            for nid, pr in self.trk.progress.items():
                if nid != self.id:
                    pr.recent_active = False
            return
        if t is MT.PROP:
            self._leader_propose(m)
            return
        if t is MT.READ_INDEX:
            self._leader_read_index(m)
            return
        pr = self.trk.progress.get(m.frm)
        if pr is None:
            return
        if t is MT.APP_RESP:
            pr.recent_active = True
            if m.reject:
                hint = m.reject_hint
                if m.log_term > 0:
                    hint, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
                if pr.maybe_decr_to(m.index, hint):
                    if pr.state is ProgressState.REPLICATE:
                        pr.become_probe()
                    self._send_append(m.frm)
                return
            old_paused = pr.is_paused()
            if not pr.maybe_update(m.index):
                return
            if pr.state is ProgressState.PROBE:
                pr.become_replicate()
            elif pr.state is ProgressState.SNAPSHOT and pr.match + 1 >= self.log.first_index():
                pr.become_probe()
                pr.become_replicate()
            elif pr.state is ProgressState.REPLICATE:
                pr.inflights.free_le(m.index)
            if self._maybe_commit():
                self._bcast_append()
            elif old_paused and not self._paced(pr):
                self._send_append(m.frm)
            while not self._paced(pr) and self._send_append(m.frm, send_if_empty=False):
                pass
            if m.frm == self.lead_transferee and pr.match == self.log.last_index():
                self._send(Message(MT.TIMEOUT_NOW, to=m.frm))
        elif t is MT.HEARTBEAT_RESP:
            pr.recent_active = True
            pr.probe_sent = False
            if pr.state is ProgressState.REPLICATE and pr.inflights.full():
                pr.inflights.free_first_one()
            if pr.match < self.log.last_index():
                self._send_append(m.frm)
            if not m.context:
                return
            acks = self.read_only.recv_ack(m.frm, m.context)
            if acks is None:
                return
            votes = {v: True for v in acks}
            if _won(self.trk.voters, votes):
                for rs in self.read_only.advance(m.context):
                    self._respond_read_index(rs)
        elif t is MT.SNAP_STATUS:
            if pr.state is not ProgressState.SNAPSHOT:
                return
            if m.reject:
                pr.pending_snapshot = 0
            pr.become_probe()
            pr.probe_sent = True  # wait for the next heartbeat answer before probing
        elif t is MT.UNREACHABLE:
            if pr.state is ProgressState.REPLICATE:
                pr.become_probe()
        elif t is MT.TRANSFER_LEADER:
            self._leader_transfer(m.frm, pr.is_learner)

    def _leader_propose(self: Raft, m: Message) -> None:
        if not m.entries:
            raise AssertionError("proposal without entries")
        if self.id not in self.trk.progress:
            return self._drop(m, "this node was removed from the cluster")
        if self.lead_transferee != NONE:
            return self._drop(m, f"leadership is being transferred to {self.lead_transferee}")
        ents = list(m.entries)
        for i, e in enumerate(ents):
            if e.type is EntryType.CONF_CHANGE:
                if self.pending_conf_index > self.log.applied:
                    if m.to == NONE:
                        raise ProposalDropped("another membership change is still being applied")
                    ents[i] = Entry(0, 0)  # keep indexes of the batch stable, drop the change
                else:
                    self.pending_conf_index = self.log.last_index() + i + 1
        self._append_entries(ents)
        self._bcast_append()

    def _append_entries(self: Raft, ents: list[Entry]) -> None:
        li = self.log.last_index()
        stamped = [Entry(self.term, li + 1 + i, e.type, e.data) for i, e in enumerate(ents)]
        li = self.log.append(stamped)
        # The leader counts its own log; it is persisted before any message goes out.
        self.trk.progress[self.id].maybe_update(li)
        self._maybe_commit()

    def _maybe_commit(self: Raft) -> bool:
        # The leader's own copy counts only once it is on disk: with a single voter,
        # counting unsynced entries would "commit" what a crash can still lose. (With
        # more voters a follower's ack already implies the leader persisted first.)
        me = self.trk.progress.get(self.id)
        stable = self.log.unstable.offset - 1
        if me is not None and me.match > stable:
            match, me.match = me.match, stable
            mci = self.trk.committed()
            me.match = match
        else:
            mci = self.trk.committed()
        if self.log.maybe_commit(mci, self.term, any_term=self.test_commit_any_term):
            self._release_pending_reads()
            return True
        return False

    def _committed_entry_in_current_term(self: Raft) -> bool:
        return self.log.zero_term_on_err(self.log.committed) == self.term

    def _release_pending_reads(self: Raft) -> None:
        if not self.pending_read_index_messages or not self._committed_entry_in_current_term():
            return
        pending, self.pending_read_index_messages = self.pending_read_index_messages, []
        for m in pending:
            self._leader_read_index(m)

    def _leader_read_index(self: Raft, m: Message) -> None:
        if not self._committed_entry_in_current_term():
            # Until an entry of this term commits, our commit index may be behind the
            # true one (thesis 6.4 step 1): queue the read. A single voter too: after a
            # restart its commit index is the (lazily written) one on disk, older than
            # what it acknowledged before the crash.
            self.pending_read_index_messages.append(m)
            return
        if self.trk.is_singleton():
            self._respond_read_index(ReadIndexStatus(m, self.log.committed))
            return
        self.read_only.add_request(self.log.committed, m)
        self.read_only.recv_ack(self.id, m.context)
        self._bcast_heartbeat(m.context)

    def _respond_read_index(self: Raft, rs: ReadIndexStatus) -> None:
        req = rs.req
        if req.to == NONE or req.frm == self.id:
            self.read_states.append(ReadState(rs.index, req.context))
        else:
            self._send(Message(MT.READ_INDEX_RESP, to=req.frm, index=rs.index, context=req.context))

    def _leader_transfer(self: Raft, transferee: int, is_learner: bool) -> None:
        if is_learner or transferee == self.id:
            return
        if self.lead_transferee == transferee:
            return
        self.lead_transferee = transferee
        self.election_elapsed = 0  # the transfer must finish within one election timeout
        pr = self.trk.progress[transferee]
        if pr.match == self.log.last_index():
            self._send(Message(MT.TIMEOUT_NOW, to=transferee))
        else:
            self._send_append(transferee)

    # --- replication (paper 5.3) ---
    def _send_append(self: Raft, to: int, send_if_empty: bool = True) -> bool:
        pr = self.trk.progress[to]
        if pr.is_paused():
            return False
        prev = pr.next - 1
        try:
            prev_term = self.log.term(prev)
            ents = self.log.entries_from(pr.next, self.cfg.max_size_per_msg)
        except (CompactedError, UnavailableError):
            return self._send_snapshot(to)
        if not ents and not send_if_empty:
            return False
        self._send(
            Message(
                MT.APP,
                to=to,
                index=prev,
                log_term=prev_term,
                entries=tuple(ents),
                commit=self.log.committed,
            )
        )
        pr.sent_entries(ents[-1].index if ents else None)
        pr.commit_sent = max(pr.commit_sent, min(self.log.committed, ents[-1].index if ents else prev))
        return True

    def _send_snapshot(self: Raft, to: int) -> bool:
        pr = self.trk.progress[to]
        if not pr.recent_active:
            return False
        sending = sum(1 for p in self.trk.progress.values() if p.state is ProgressState.SNAPSHOT)
        if sending >= self.cfg.max_snapshots_inflight:
            # Offered again with its next heartbeat answer, not with every proposal meanwhile.
            pr.probe_sent = pr.state is ProgressState.PROBE
            return False
        try:
            snap = self.log.snapshot()
        except SnapshotTemporarilyUnavailable:
            return False
        if snap.is_empty():
            raise AssertionError("need a non-empty snapshot")
        pr.become_snapshot(snap.index)
        self._send(Message(MT.SNAP, to=to, snapshot=snap))
        return True

    def _paced(self: Raft, pr: Progress) -> bool:
        """A learner that is replicating and has less than a batch waiting gets its entries
        with the next heartbeat round: its appends stay off the commit path."""
        return (
            pr.is_learner
            and pr.state is ProgressState.REPLICATE
            and self.log.last_index() - pr.next + 1 < self.cfg.learner_batch
        )

    def _bcast_append(self: Raft) -> None:
        # Voters first: a commit waits for them, not for the learners.
        for nid in sorted(self.trk.voters) + sorted(self.trk.learners):
            if nid != self.id and not self._paced(self.trk.progress[nid]):
                self._send_append(nid)

    def _bcast_heartbeat(self: Raft, ctx: bytes | None = None) -> None:
        """A heartbeat round. A read barrier's own round (`ctx` given) needs only the voters'
        answers, so it goes to them alone. The ticking round carries a paced learner's entries
        (an append in place of its heartbeat) or the commit index it lacks; an idle learner gets
        a beat every learner_heartbeat_rounds rounds."""
        barrier = ctx is not None
        if ctx is None:
            ctx = self.read_only.last_pending_ctx()
        every = self.cfg.learner_beat_every()
        last = self.log.last_index()
        for nid in sorted(self.trk.progress):
            if nid == self.id:
                continue
            pr = self.trk.progress[nid]
            if pr.is_learner:
                if barrier:
                    continue
                if pr.state is ProgressState.REPLICATE and pr.next <= last and self._send_append(nid):
                    continue
                news = min(pr.match, self.log.committed) > pr.commit_sent
                if not news and (self.heartbeat_rounds + nid) % every:
                    continue
            # Never tell a follower to commit past what it is known to have.
            commit = min(pr.match, self.log.committed)
            pr.commit_sent = max(pr.commit_sent, commit)
            self._send(Message(MT.HEARTBEAT, to=nid, commit=commit, context=ctx))


def _won(voters: set[int], votes: dict[int, bool]) -> bool:
    return vote_result(voters, votes) is VoteResult.WON
