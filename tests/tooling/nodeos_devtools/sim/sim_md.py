"""The simulated md raid1 mirror of a primary and its legs' NVMe-oF controllers (a fake, named as
such: only the failover workload uses it), configured as the product configures them.

- A replica leg is attached with ctrl_loss_tmo=-1 and fast_io_fail_tmo=-1 (nodeos/dataplane
  `RemoteSpec`): when its controller is not live (keep-alive or an I/O went unanswered for
  `KATO_S`, or the target refused), the leg's I/O is requeued, never failed, and the controller
  reconnects every `RECONNECT_S`; once live again the requeued I/O goes out on the new
  connection and the leg never left md. md therefore never degrades on its own over a network
  loss: a write completes only once every md member has it.
- Only the agent takes a leg out (`cut`: its loss bounded first, md fails the member, the
  controller is deleted), so the queued I/O fails and md completes the held writes on the
  other members. A bounded leg whose controller is not live fails its I/O at once.
- Every member change writes md's superblock to the remaining members; while that write is
  queued on a blocked leg, md completes no write and takes no other change (MD_SB_CHANGE_PENDING:
  the wedge of issue 25, md's stop waiting for ever on a leg whose replica went).
- Writes to one block are serialized per leg (serialize_policy, which the product sets:
  nodeos/dataplane/kernel/md_serial.py).
- md's write-intent bitmap (the product creates every mirror with one): per leg that has been in
  sync in this md, the regions (`REGION_LBAS` blocks) md wrote while the leg did not take them,
  and those of the writes the leg had in flight or queued when md failed it (md sets a bit
  before it writes, so such a write may or may not have landed). A leg re-added to the same md
  gets only those regions copied (a partial resync); a leg new to this md (a new mirror: a new
  epoch, the primary restarted, a new replica) or whose full copy never finished, all of it.
The messages (writes, leg I/O, connects, keep-alives, rebuilds): sim_kernel.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The simulator runs the product's timings at its lease's scale (a 1 s lease, the product's
# default is nodeos/storage/failover.py DEFAULT_LEASE_S = 3 s).
KATO_S = 0.5  # keep-alive timeout: an unanswered keep-alive or I/O this old resets the controller
KA_S = 0.25  # a keep-alive this often on an idle live controller
RECONNECT_S = 0.3  # reconnect_delay
RESYNC_S = 1.0  # a rebuild copy unanswered this long starts over
MD_MEMBER = ("in-sync", "syncing")  # leg states md writes to
REGION_LBAS = 2  # blocks per bitmap bit (md's bitmap chunk, at the simulator's 16-block scale)


@dataclass
class Ctrl:
    """The primary's NVMe controller to one replica."""

    state: str  # live | connecting
    since: float  # when it entered that state
    gen: int = 0  # the connection its I/O goes on (a new one at each connect)
    bounded: bool = False  # loss bounded (fast_io_fail_tmo 0, ctrl_loss_tmo 1): I/O fails, never queues
    tried: float = -1e9  # the last connect attempt
    probe: float | None = None  # a keep-alive sent and not answered yet
    last_ka: float = -1e9


@dataclass
class Leg:
    state: str  # md's view: attaching (not a member yet) | syncing | in-sync | failed (out of md)
    since: float
    ctrl: Ctrl | None = None  # None: no controller (never attached, or cut)


@dataclass
class Pending:
    lba: int
    version: int
    attempt: int  # the host's attempt to answer
    sent: float
    waiting: set[int]  # md members that have not completed it
    acked_by: set[int] = field(default_factory=set)
    gens: dict[int, int] = field(default_factory=dict)  # leg -> the connection it goes on
    held: set[int] = field(default_factory=set)  # legs it waits on behind an earlier write to its lba
    sent_at: dict[int, float] = field(default_factory=dict)  # leg -> when it went out (absent: queued)


@dataclass
class Mirror:
    epoch: int
    legs: dict[int, Leg]
    pending: dict[int, Pending] = field(default_factory=dict)
    assembled: bool = False  # the legs the map counts in sync are members: the front end may open
    front_open: bool = False  # the front end is ANA optimized (set by the agent; kernel state)
    frozen: bool = False  # the leg watch's write freeze (md's suspend range)
    sb: dict[int, float | None] = field(default_factory=dict)  # superblock write per leg: sent at, or queued
    stopped: bool = False
    closing: bool = False  # its volume is being deleted: the front end is gone
    restart: bool = False  # md assembled again after the node restarted, at the epoch it had
    # The write-intent bitmap, per leg with a base in this md (in sync here once): the regions it
    # may miss, in the order md dirtied them, each with how ("in flight" when the leg left, or
    # "away": written without it). A leg absent has no base: a full copy.
    dirty: dict[int, dict[int, str]] = field(default_factory=dict)

    def members(self) -> list[int]:
        return sorted(n for n, leg in self.legs.items() if leg.state in MD_MEMBER and leg.ctrl is not None)

    def blocked(self) -> bool:
        """md waits on a superblock write: no write completes, no change is taken."""
        return bool(self.sb)

    def idle(self) -> bool:
        """Nothing in flight on any leg: md may stop."""
        return not self.sb and not any(p.waiting for p in self.pending.values())

    def fail_member(self, nid: int, now: float) -> None:
        """md marks the leg faulty: its I/O is failed, and the superblock goes to the others."""
        leg = self.legs[nid]
        was = leg.state in MD_MEMBER
        leg.state, leg.since = "failed", now
        self.sb.pop(nid, None)
        for p in self.pending.values():
            if nid in p.waiting:  # sent or queued: it may have landed or not, its bit is set
                self.mark(nid, p.lba, "in flight")
            p.waiting.discard(nid)
            p.held.discard(nid)
        if was:
            for x in self.members():
                self.sb.setdefault(x, None)

    def mark(self, nid: int, lba: int, how: str) -> None:
        """Leg `nid` may miss block `lba`: its region's bit stays set until the leg is resynced."""
        regions = self.dirty.get(nid)
        if regions is not None:
            regions.setdefault(lba // REGION_LBAS, how)

    def written(self, lba: int, members: list[int]) -> None:
        """md writes `lba` to its members: every other leg with a base misses it."""
        for nid in self.dirty:
            if nid not in members:
                self.mark(nid, lba, "away")

    def synced(self, nid: int) -> None:
        """The leg's resync finished: it holds all md wrote (what is in flight to it is still
        waited for, and marked if md fails it)."""
        self.dirty[nid] = {}

    def write_superblock(self, now: float) -> None:
        """The superblock writes md waits for: gone with their leg, failed on a bounded leg whose
        controller is not live (md then fails that member too); on an unbounded one they stay
        queued for ever. They go out and complete as I/O (sim_kernel.py)."""
        for nid in sorted(self.sb):
            ctrl = self.legs[nid].ctrl
            if ctrl is None or self.legs[nid].state not in MD_MEMBER:
                self.sb.pop(nid, None)
            elif ctrl.bounded and ctrl.state != "live":
                self.fail_member(nid, now)

    def cut(self, nids: list[int], now: float) -> None:
        """cut_mirror_legs: every leg's loss bounded first, then all failed in md and all
        controllers deleted in one round (nodeos/dataplane/kernel/backend.py)."""
        for nid in nids:
            ctrl = self.legs[nid].ctrl
            if ctrl is not None:
                ctrl.bounded = True
        for nid in nids:
            self.fail_member(nid, now)
        self.write_superblock(now)
        for nid in nids:
            self.legs[nid].ctrl = None

    def cut_one_unbounded(self, nid: int, now: float) -> bool:
        """The old teardown (before issue 25), one leg: md fails it (unless a superblock write
        still waits) and its controller goes; nothing bounded. False: md waits."""
        self.write_superblock(now)
        if self.blocked():
            return False
        self.fail_member(nid, now)
        self.legs[nid].ctrl = None
        return True

    def behind(self, wid: int, p: Pending, nid: int, serialize: bool = True) -> bool:
        """serialize_policy: an earlier write to the same block is still in flight on (or
        waiting for) leg `nid` on this connection."""
        if not serialize:
            return False
        for w, q in self.pending.items():
            if w >= wid:
                return False
            if q.lba == p.lba and nid in q.waiting and q.gens.get(nid) == p.gens.get(nid):
                return True
        return False

    def completes(self, p: Pending) -> bool:
        """md completes a write once every member it went to has it (a member that failed out
        no longer counts), unless a superblock write or the leg watch's freeze holds writes."""
        return not p.waiting and not self.sb and not self.frozen
