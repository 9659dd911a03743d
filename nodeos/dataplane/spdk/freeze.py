"""Write freezes of a primary's mirror on the SPDK data plane (snapshots of replicated volumes).

SPDK v26.05 has no RPC that holds a bdev's writes, and no `nvmf_subsystem_pause` / `resume` RPCs:
pause and resume are internal, done by the RPCs that change a subsystem around their change. A
primary's raid bdev is written only through its front-end subsystem, so the freeze is made there
from two RPCs the target has:

- every listener's ANA state of a *freeze group* (the namespace's home group + FREEZE_GROUP_OFFSET)
  is set inaccessible (a group no namespace is in yet: nothing changes for the hosts);
- `nvmf_subsystem_set_ns_ana_group` moves namespace 1 into that group. SPDK pauses the namespace
  for the move, which waits until its outstanding I/O has completed; I/O that arrives meanwhile is
  queued and, after the move, answered "ANA inaccessible". When the call returns, every write a
  host was told is done is on every in-sync leg, and no new write reaches the raid.

Thaw moves the namespace back to its home group; SPDK sends an ANA change event and the hosts'
I/O flows again. Hosts ride a freeze as a path state: Linux native multipath queues the I/O while
a controller is live; SPDK's bdev_nvme retries it (every second while no path is usable). A host
without multipath would see the I/O fail.

The reads a freeze needs (the front end, its legs' controllers) and the freeze group's listener
states come before the hold: `prepare_mirror_freeze` does them, and a freeze right after it (same
subsystems: no subsystem changed in between, within PREPARED_S) holds writes with the one move.
A thaw right after its freeze moves the namespace home without reading the subsystem again, when
no subsystem changed since (`nvmf_changes`, counted by the RPC client); else it reads first.
`read_and_thaw_mirror` sends the raid's read and that move together: SPDK answers a read as it
takes it, in order, so the raid is read while the writes are still held, and both cost one wait
for the target's RPC poll (every 4 ms on a polling target) instead of two.

The freeze is target state (the group number says it all, nothing is kept in nodeosd): it
outlives a crash of nodeosd -- the agent reads it at start (`mirror_writes_frozen`) and thaws what
the map no longer wants -- and a re-export keeps it (`apply_export` keeps a frozen namespace in
its freeze group). A restarted target has none (its front ends are exported afresh). A fence
makes the home group inaccessible, so a thaw never lifts a fence.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from nodeos.dataplane.base import MirrorInfo
from nodeos.dataplane.mirror_names import check_mirror_id
from nodeos.dataplane.spdk import parse
from nodeos.dataplane.spdk.client import SpdkRpc, SpdkRpcError
from nodeos.dataplane.spdk.errors import map_error
from nodeos.dataplane.spdk.mirror_plan import mirror_info, raid_of
from nodeos.dataplane.spdk.requests import (
    Request,
    get_bdevs,
    get_subsystems,
    set_ana_state,
    set_ns_ana_group,
)
from nodeos.errors import NodeosError, NotFound, OperationFailed

# SPDK subsystems have 32 namespace ids by default, and so 32 ANA groups; nodeos uses 1 and 2
# (mirror_names.ANA_GROUP_*), their freeze groups are 17 and 18.
FREEZE_GROUP_OFFSET = 16
# A prepared freeze is used this long: its check of the legs' controllers is a moment's reading.
PREPARED_S = 1.0


# ---- pure -------------------------------------------------------------------------------
def freeze_group(home: int) -> int:
    return home + FREEZE_GROUP_OFFSET


def is_freeze_group(group: int) -> bool:
    return group > FREEZE_GROUP_OFFSET


def home_group(group: int) -> int:
    """The group a namespace belongs to when not frozen."""
    return group - FREEZE_GROUP_OFFSET if is_freeze_group(group) else group


def ns1_group(sub: dict[str, Any]) -> int:
    return int((parse.subsystem_ns1(sub) or {}).get("anagrpid", 1))


def exports_bdev(sub: dict[str, Any] | None, bdev: str) -> bool:
    ns = parse.subsystem_ns1(sub or {}) or {}
    return bdev in (ns.get("bdev_name"), ns.get("name"))


# ---- edge -------------------------------------------------------------------------------
class SpdkFreeze:
    """The freeze half of SpdkDataPlane (which provides call(), _maybe() and _subsystem())."""

    rpc: SpdkRpc
    front_ends: dict[str, str]  # mirror id -> the NQN of the front end exporting it (a cache)
    nvmf_changes: int  # subsystem-changing RPCs sent so far (SpdkRpc counts them)
    # mirror id -> (front end NQN, group, nvmf_changes after, monotonic time): a freeze prepared
    # (the freeze group), a freeze made (the home group)
    _prepared: dict[str, tuple[str, int, int, float]]
    _frozen: dict[str, tuple[str, int, int, float]]

    def call(self, req: Request) -> Any:
        raise NotImplementedError

    def _subsystem(self, nqn: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _blocked_legs(self, mirror_id: str) -> list[str]:
        raise NotImplementedError

    def _front_end(self, mirror_id: str) -> dict[str, Any] | None:
        """The subsystem exporting the mirror's raid bdev: by the NQN apply_export saw, else found
        once in a listing of every subsystem (after a restart of nodeosd), then by name again."""
        nqn = self.front_ends.get(mirror_id)
        sub = self._subsystem(nqn) if nqn else None
        if exports_bdev(sub, mirror_id):
            return sub
        self.front_ends.pop(mirror_id, None)
        for s in self.call(get_subsystems()) or []:
            ns = parse.subsystem_ns1(s) or {}
            if ns.get("bdev_name") and s.get("nqn"):
                self.front_ends.setdefault(str(ns["bdev_name"]), str(s["nqn"]))
        nqn = self.front_ends.get(mirror_id)
        return self._subsystem(nqn) if nqn else None

    def prepare_mirror_freeze(self, mirror_id: str) -> None:
        """Everything of a freeze but the move that holds writes (see the module doc)."""
        check_mirror_id(mirror_id)
        self._prepared.pop(mirror_id, None)
        sub = self._front_end(mirror_id)
        if sub is None or is_freeze_group(ns1_group(sub)):
            return
        nqn, fg = str(sub["nqn"]), freeze_group(ns1_group(sub))
        if blocked := self._blocked_legs(mirror_id):
            # the move would wait for their blocked writes, holding every other RPC meanwhile
            raise OperationFailed(
                f"mirror {mirror_id}: leg(s) {', '.join(blocked)} not connected, their writes wait; "
                "a freeze would wait for them",
                field="mirror_id",
            )
        for a in sub.get("listen_addresses") or []:
            self.call(set_ana_state(nqn, parse.listener_of(a), "inaccessible", fg))
        self._prepared[mirror_id] = (nqn, fg, self.nvmf_changes, time.monotonic())

    def freeze_mirror_writes(self, mirror_id: str) -> None:
        """Hold the front end's writes once its outstanding ones are done (see the module doc).
        No front end: nothing can write to the mirror (SPDK reaches a raid bdev only through it)."""
        check_mirror_id(mirror_id)
        ready = self._prepared.pop(mirror_id, None)
        if ready is None or not self._fresh(ready, PREPARED_S):
            self.prepare_mirror_freeze(mirror_id)
            ready = self._prepared.pop(mirror_id, None)
            if ready is None:
                return  # no front end, or frozen already
        nqn, fg = ready[0], ready[1]
        try:
            self.call(set_ns_ana_group(nqn, 1, fg))  # waits for the namespace's outstanding I/O
        except NodeosError:
            with contextlib.suppress(NodeosError):  # never left frozen by a freeze that failed
                self.thaw_mirror_writes(mirror_id)
            raise
        self._frozen[mirror_id] = (nqn, home_group(fg), self.nvmf_changes, time.monotonic())

    def thaw_mirror_writes(self, mirror_id: str) -> None:
        check_mirror_id(mirror_id)
        made = self._frozen.pop(mirror_id, None)
        if made is not None and self._fresh(made, None):
            with contextlib.suppress(NodeosError):  # gone or moved meanwhile: read and see
                self.call(set_ns_ana_group(made[0], 1, made[1]))
                return
        sub = self._front_end(mirror_id)
        if sub is not None and is_freeze_group(grp := ns1_group(sub)):
            self.call(set_ns_ana_group(str(sub["nqn"]), 1, home_group(grp)))

    def read_and_thaw_mirror(self, mirror_id: str) -> MirrorInfo | None:
        """The mirror read while its writes are held, then the thaw (see the module doc)."""
        check_mirror_id(mirror_id)
        made = self._frozen.get(mirror_id)
        if made is None or not self._fresh(made, None):
            info = self.mirror_status(mirror_id)
            self.thaw_mirror_writes(mirror_id)
            return info
        del self._frozen[mirror_id]
        read, move = get_bdevs(mirror_id), set_ns_ana_group(made[0], 1, made[1])
        got, moved = self.rpc.call_many([read, move])
        if isinstance(moved, SpdkRpcError):  # gone or moved meanwhile: read and see
            self.thaw_mirror_writes(mirror_id)
        if isinstance(got, SpdkRpcError):
            err = map_error(got.method, got.params, got.code, got.message)
            if isinstance(err, NotFound) or "-32602" in err.message:
                return None  # no such bdev: the mirror is not assembled (as _maybe reads it)
            raise err
        b = got[0] if got else None
        return mirror_info(mirror_id, b) if b is not None and raid_of(b) is not None else None

    def mirror_status(self, mirror_id: str) -> MirrorInfo | None:
        raise NotImplementedError

    def _fresh(self, entry: tuple[str, int, int, float], max_age_s: float | None) -> bool:
        """No subsystem changed since `entry` was taken (and it is at most max_age_s old)."""
        young = max_age_s is None or time.monotonic() - entry[3] <= max_age_s
        return entry[2] == self.nvmf_changes and young

    def mirror_writes_frozen(self, mirror_id: str) -> bool:
        check_mirror_id(mirror_id)
        sub = self._front_end(mirror_id)
        return sub is not None and is_freeze_group(ns1_group(sub))
