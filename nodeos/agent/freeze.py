"""Write freezes of the mirrors this node is primary of, for snapshots of replicated volumes
(see nodeos/storage/snapshot_map.py for the phases in the map).

The map says which volume should be frozen for which snapshot (`volume.freeze`); the primary
holds the writes of its md mirror while it does, and lets them go when the map no longer
asks. A freeze is bounded: after FREEZE_ABORT_S the primary asks the leader to abort the
snapshot (it thaws once the abort is committed); after FREEZE_HARD_S, when even that could not
be committed (no quorum), it thaws anyway -- the volume's availability comes first -- and
reports its own snapshot failed, so the map drops the snapshot unless it is already ready.

md's suspend range is kernel state: it outlives a crash of nodeosd. A restarted agent reads
it once and thaws every mirror the map no longer wants frozen.

`decide` is pure (state in, actions out); `Freezer` holds what this node froze and when.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FREEZE_ABORT_S = 10.0
FREEZE_HARD_S = 30.0
# After a one-step snapshot (every leg taken, the writes let go) the map still settles it by
# reports, an agent pass or more per node; no write waits for that, only the console (300 s).
# A node that never reports its leg is given up after this; under TCG the lab's passes took
# 26 s, and the 10 s meant for held writes dropped snapshots every leg of which was taken.
TAKEN_ABORT_S = 60.0
TAKEN_HARD_S = TAKEN_ABORT_S + (FREEZE_HARD_S - FREEZE_ABORT_S)
FREEZE_POLL_S = 0.5  # agent passes while something is frozen (the bounds above are checked then)

ActionKind = Literal["freeze", "thaw", "abort", "expire"]


@dataclass(frozen=True)
class Held:
    snap: str  # the snapshot's uuid
    since: float  # monotonic time the writes were frozen (or found frozen at start)
    # A one-step snapshot (nodeos/agent/onestep.py) took every leg and let the writes go: held
    # for the map's phases only, nothing to thaw.
    thawed: bool = False


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    vol_uuid: str
    snap: str | None = None


def wanted(st: dict[str, Any], me: int, vrecs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """volume uuid -> snapshot uuid, for every local mirror the map wants frozen now."""
    out: dict[str, str] = {}
    for v in vrecs.values():
        if v.get("role") != "primary" or v["state"] != "ready":
            continue
        w = st["volumes"].get(v["uuid"])
        if w is None or not w.get("freeze") or w["primary"] != me:
            continue
        snap = st["snapshots"].get(w["freeze"])
        if snap is not None and snap["state"] == "creating":
            out[v["uuid"]] = w["freeze"]
    return out


def decide(
    want: dict[str, str],
    held: dict[str, Held],
    found_frozen: set[str],
    expired: set[str],
    now: float,
) -> list[Action]:
    """`found_frozen`: mirrors the kernel holds that this agent did not freeze (a previous
    nodeosd did); `expired`: snapshots whose freeze ran out (never frozen again)."""
    acts: list[Action] = []
    for vol in sorted(set(held) | found_frozen):
        h = held.get(vol)
        snap = want.get(vol)
        if h is None:  # found frozen at start
            acts.append(Action("freeze", vol, snap) if snap and snap not in expired else Action("thaw", vol))
        elif snap != h.snap:
            acts.append(Action("thaw", vol, h.snap))
        elif now - h.since >= (TAKEN_HARD_S if h.thawed else FREEZE_HARD_S):
            acts.append(Action("expire", vol, h.snap))
        elif now - h.since >= (TAKEN_ABORT_S if h.thawed else FREEZE_ABORT_S):
            acts.append(Action("abort", vol, h.snap))
    for vol, snap in sorted(want.items()):
        if vol not in held and vol not in found_frozen and snap not in expired:
            acts.append(Action("freeze", vol, snap))
    return acts


@dataclass
class Freezer:
    held: dict[str, Held] = field(default_factory=dict)
    found_frozen: set[str] = field(default_factory=set)
    expired: set[str] = field(default_factory=set)
    kernel_checked: bool = False

    def frozen_for(self, vol_uuid: str) -> str | None:
        h = self.held.get(vol_uuid)
        return None if h is None else h.snap

    def froze(self, vol_uuid: str, snap: str, now: float) -> None:
        self.found_frozen.discard(vol_uuid)
        if (self.held.get(vol_uuid) or Held("", 0.0)).snap != snap:
            self.held[vol_uuid] = Held(snap, now)

    def took(self, vol_uuid: str, snap: str, now: float) -> None:
        """Every leg taken in one step, the writes already let go (reported frozen for `snap`)."""
        self.found_frozen.discard(vol_uuid)
        self.held[vol_uuid] = Held(snap, now, thawed=True)

    def thawed(self, vol_uuid: str) -> None:
        self.found_frozen.discard(vol_uuid)
        self.held.pop(vol_uuid, None)

    def forget_expired(self, st: dict[str, Any]) -> None:
        self.expired = {s for s in self.expired if s in st["snapshots"]}
