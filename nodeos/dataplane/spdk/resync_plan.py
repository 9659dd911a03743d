"""Partial resync of a returning SPDK mirror leg (issue 29), the pure parts: names of the tracking
and step snapshots, the decision partial or full, and what to copy.

How it works (the edge: spdk/resync.py; why: docs/dataplane.md "Partial resync on SPDK"):
- SPDK v26.05 raid1 has no write-intent bitmap, and re-adding a member to an online raid1 always
  copies it in full. What it has: lvol snapshots, and `bdev_lvol_start_shallow_copy`, which
  writes only the clusters a read-only lvol owns itself onto a bdev.
- When the primary cuts a *live* leg (a rolling upgrade releasing its node), it first freezes
  the front end (every acknowledged write is then on every in-sync leg), checks the leg is in
  sync, snapshots its local lvol: the *tracking snapshot* `@trk.<leg>`, then cuts the leg and
  thaws. Every write the leg misses from then on lands in clusters the lvol owns after it.
- When the leg is back: the lvol is snapshotted again (`@rsy.<leg>.<k>`); each snapshot between
  the tracking one and the live lvol (ours and any a user took meanwhile) is shallow-copied onto
  the leg, oldest first; rounds repeat while the host writes; the last round runs under a
  freeze, and the raid is made again over its members plus the leg (a created raid1 does no
  initial sync), the front end's namespace moved onto it. Then the step and tracking snapshots
  are deleted (one clone each: SPDK moves their clusters into it, metadata only).
- A leg that blocked when it was cut (unreachable: its writes wait) cannot be frozen around, and
  writes in flight when it went may lie in clusters the snapshot holds: no tracking snapshot,
  a full copy. Whatever is doubtful (no tracking snapshot, not on the lvol's chain, another
  size, a leg that was not in sync when cut) means a full copy, never a partial one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# '@' is no character of a volume or snapshot id (nodeos.dataplane.ids): these never clash with
# the product's lvols, and list_volumes leaves them out.
TRACK_PREFIX = "@trk."
STEP_PREFIX = "@rsy."
MAX_ROUNDS = 4  # rounds copied while the host writes, before the last one under a freeze
CALM_BYTES = 64 * 1024 * 1024  # a round left with this little to copy goes under the freeze next


def leg_key(leg_device: str) -> str:
    """A short stable key of a leg (its bdev name, e.g. nodeos_rep_<hash>n1): 20 hex."""
    return hashlib.sha256(leg_device.encode()).hexdigest()[:20]


def track_name(leg_device: str) -> str:
    return TRACK_PREFIX + leg_key(leg_device)


def step_name(leg_device: str, k: int) -> str:
    return f"{STEP_PREFIX}{leg_key(leg_device)}.{k}"


def is_internal(lvol_name: str) -> bool:
    """A tracking or step snapshot: not a volume of the product's (list_volumes hides it)."""
    return lvol_name.startswith((TRACK_PREFIX, STEP_PREFIX))


def step_index(lvol_name: str, leg_device: str) -> int | None:
    pre = f"{STEP_PREFIX}{leg_key(leg_device)}."
    tail = lvol_name[len(pre) :] if lvol_name.startswith(pre) else ""
    return int(tail) if tail.isdigit() else None


@dataclass(frozen=True)
class Lvol:
    """What the plan needs of one lvol (from bdev_get_bdevs: name, its parent snapshot, the
    clusters it owns, its size)."""

    name: str
    parent: str | None
    clusters: int
    size_bytes: int


def lvol_of(bdev: Mapping[str, Any]) -> Lvol | None:
    lv = (bdev.get("driver_specific") or {}).get("lvol")
    if not isinstance(lv, dict):
        return None
    alias = next((str(a) for a in bdev.get("aliases") or [] if "/" in str(a)), None)
    if alias is None:
        return None
    owned = int(lv.get("num_allocated_clusters") or 0)
    size = int(bdev.get("num_blocks") or 0) * int(bdev.get("block_size") or 0)
    return Lvol(alias.partition("/")[2], lv.get("base_snapshot") or None, owned, size)


def chain(lvols: Mapping[str, Lvol], head: str) -> list[str]:
    """The snapshots under lvol `head`, nearest first (its parent, then that one's...)."""
    out: list[str] = []
    cur = lvols.get(head)
    while cur is not None and cur.parent and cur.parent not in out:
        out.append(cur.parent)
        cur = lvols.get(cur.parent)
    return out


@dataclass(frozen=True)
class Plan:
    """partial: copy `copies` (oldest first) onto the leg, then join it without a rebuild;
    else a full copy (`why`)."""

    partial: bool
    why: str
    copies: tuple[str, ...] = ()
    bytes_estimate: int = 0


def plan(
    lvols: Mapping[str, Lvol],
    head: str,
    leg_device: str,
    volume_bytes: int,
    leg_bytes: int,
    cluster_bytes: int,
    copied: Sequence[str] = (),
) -> Plan:
    """Partial or full for a leg back at a mirror whose local lvol is `head`. `copied`: the
    snapshots already copied onto the leg in an earlier round of this resync (not again)."""
    t = track_name(leg_device)
    if t not in lvols:
        return Plan(False, "no tracking snapshot for this leg (never cut live, or its tracking was lost)")
    if head not in lvols:
        return Plan(False, f"the mirror's local member {head!r} is not an lvol")
    under = chain(lvols, head)
    if t not in under:
        return Plan(False, "the tracking snapshot is not under the volume's lvol any more")
    if lvols[t].size_bytes != volume_bytes or lvols[head].size_bytes != volume_bytes:
        return Plan(False, "the volume changed size since the leg was cut")
    if leg_bytes != volume_bytes:
        return Plan(False, f"the leg is {leg_bytes} bytes, the volume {volume_bytes}")
    newer = list(reversed(under[: under.index(t)]))  # oldest first, the tracking one excluded
    todo = tuple(n for n in newer if n not in set(copied))
    # the lvol's own clusters are written since the last snapshot: the next step snapshot takes them
    owned = sum(lvols[n].clusters for n in todo) + lvols[head].clusters
    return Plan(True, "tracked", todo, owned * cluster_bytes)


def leftovers(lvols: Mapping[str, Lvol], in_sync_legs: Sequence[str]) -> list[str]:
    """Tracking and step snapshots no longer needed: those of legs in sync in the running mirror
    (a crash after the join, or a cut that did not happen), and step snapshots whose tracking
    snapshot is gone (that leg comes back in full). Deleting one only ever turns a later resync
    into a full copy, never a wrong partial one."""
    keys = {leg_key(d) for d in in_sync_legs}
    tracked = {n[len(TRACK_PREFIX) :] for n in lvols if n.startswith(TRACK_PREFIX)}
    out = []
    for n in lvols:
        if n.startswith(TRACK_PREFIX) and n[len(TRACK_PREFIX) :] in keys:
            out.append(n)
        elif n.startswith(STEP_PREFIX):
            key = n[len(STEP_PREFIX) :].partition(".")[0]
            if key in keys or key not in tracked:
                out.append(n)
    return sorted(out)


def steps_of(lvols: Mapping[str, Lvol], leg_device: str) -> list[str]:
    """The step snapshots of a leg's resync, oldest first."""
    found = [(i, n) for n in lvols if (i := step_index(n, leg_device)) is not None]
    return [n for _, n in sorted(found)]


def next_step(lvols: Mapping[str, Lvol], leg_device: str) -> int:
    return max((step_index(n, leg_device) or 0 for n in steps_of(lvols, leg_device)), default=0) + 1


def go_final(round_no: int, last_bytes: int) -> bool:
    """Whether the next round is the last, under a freeze: little left, or enough rounds."""
    return round_no >= MAX_ROUNDS or last_bytes <= CALM_BYTES
