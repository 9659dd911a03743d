"""Which leftovers of this node's data plane may be removed (pure): the garbage rule.

A replica whose drive was pulled loses its local record while the drive is gone (the delete
finds no LV and drops the record); when the drive comes back, its LV (and maybe an export, an
md array, attached remotes) is back with nobody to delete it: the plan (nodeos/agent/plan.py)
only deletes what the node has a record of. This module finds such orphans and says which may
go, from the map at the node's applied index, the node's own records and what its data plane
lists. The shell (nodeos/agent/gc.py) scans, keeps the grace tracker and removes through a
durable operation (`orphan.remove`, nodeos/node/orphan_ops.py).

Never removed:
- anything outside nodeos' naming scheme: LVs other than `v<32 hex>` (volumes, clones: kind
  volume or clone) and `s<32 hex>` (snapshots: kind snapshot) in a pool this node has a ready
  record of; exports other than `...:vol:<uuid>` and `...:rep:<uuid>:<this node>`; md arrays
  other than `nodeos-<24 hex>`; remotes other than `...:rep:<uuid>:<node>`;
- anything this node has a local record of (any state, any kind: the plan and recovery own it);
- anything of a published volume (issue 13: its own map section and agent steps);
- anything of a volume or snapshot the map places on this node;
- anything of a volume or snapshot whose map entry is mid-operation (not `ready`, a handoff or
  a snapshot freeze in progress, a replica being copied (`in_sync` short of `placement`), its
  primary down or not yet reporting at the volume's epoch, or its primary's mirror still
  listing this node's leg), or of a snapshot whose volume is;
- anything at all while this node is not a member in good standing (not in the map, called
  down, not active or draining), holds no valid lease, has a map behind the leader's at its
  last grant, or has operations pending recovery (`gate`);
- anything seen orphaned for less than GRACE_S or fewer than GRACE_SCANS scans in a row (a
  closed gate or one scan where it is not an orphan starts the count again).
"""

from __future__ import annotations

import re
import uuid as uuidlib
from dataclasses import dataclass, field, replace
from typing import Any

from nodeos.dataplane.mirror_names import MIRROR_PREFIX, REPLICA_NQN_PREFIX, VOLUME_NQN_PREFIX
from nodeos.node import replicas
from nodeos.storage.failover_map import in_sync_of
from nodeos.storage.lookup import replica_report

GRACE_S = 60.0
GRACE_SCANS = 3
_VOL_LV = re.compile(r"^v([0-9a-f]{32})$")
_SNAP_LV = re.compile(r"^s([0-9a-f]{32})$")
_MIRROR = re.compile(r"^" + re.escape(MIRROR_PREFIX) + r"([0-9a-f]{24})$")
GOOD_NODE_STATES = ("active", "draining")


@dataclass(frozen=True)
class Found:
    """What the data plane lists: LVs (pool_id, vol_id, kind), export NQNs, md ids, remote NQNs."""

    lvs: tuple[tuple[str, str, str], ...] = ()
    exports: tuple[str, ...] = ()
    mirrors: tuple[str, ...] = ()
    remotes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Standing:
    """The node's standing, from its lease keeper (nodeos/agent/lease.py) and its store."""

    lease_valid: bool
    grant_health: str  # the last granted renewal's health: "up" / "down"
    grant_index: int  # the leader's applied index at that grant
    applied_index: int  # this node's map
    pending_intents: int


@dataclass(frozen=True)
class Orphan:
    """One volume's (by the first 24 hex of its uuid) or one snapshot's leftovers."""

    key: str  # "volume:<24 hex>" / "snapshot:<uuid>"
    kind: str  # "volume" / "snapshot"
    uuid: str | None  # the full uuid when some leftover names it (an md array names 24 hex only)
    lvs: tuple[tuple[str, str], ...] = ()  # (pool_id, vol_id)
    exports: tuple[str, ...] = ()
    mirror: str | None = None
    remotes: tuple[str, ...] = ()

    def view(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "uuid": self.uuid or self.key.split(":", 1)[1],
            "lvs": [f"{p}/{v}" for p, v in self.lvs],
            "exports": list(self.exports),
            "mirror": self.mirror,
            "remotes": list(self.remotes),
        }


@dataclass(frozen=True)
class Seen:
    since: float  # monotonic time of the first scan that found it orphaned
    scans: int
    index: int  # the map's applied index at the first sighting


def _uuid(hex32: str) -> str:
    return str(uuidlib.UUID(hex=hex32))


def _parse_uuid(text: str) -> str | None:
    try:
        u = uuidlib.UUID(text)
    except ValueError:
        return None
    return str(u) if str(u) == text else None  # nodeos writes uuids in the canonical form


def gate(st: dict[str, Any], me: int, s: Standing) -> str | None:
    """Why nothing may be removed now (None: the node may collect)."""
    node = st["nodes"].get(me)
    if node is None:
        return "this node is not a member of the map"
    if node.get("health", "up") != "up":
        return "the map calls this node down"
    if node.get("state", "active") not in GOOD_NODE_STATES:
        return f"this node is {node.get('state')}"
    if not s.lease_valid:
        return "no valid lease (the map may be stale)"
    if s.grant_health != "up":
        return "the last lease grant called this node down"
    if s.applied_index < s.grant_index:
        return "the map here is behind the leader's at the last lease grant"
    if s.pending_intents:
        return f"{s.pending_intents} operation(s) pending recovery"
    return None


def scans_beside(step_ops: list[str]) -> bool:
    """Whether the collector may scan in a pass whose plan has these steps. Only on a node the plan
    has settled (a step in flight may own what looks orphaned), except a pool delete: it waits for
    its pool to hold no LV, and an orphan in that pool is what it waits for (the soak's seed 8
    met a pool delete retried for ever beside an orphan that was never collected)."""
    return all(op == "pool.delete" for op in step_ops)


def units(found: Found, me: int, ready_pools: set[str]) -> dict[str, Orphan]:
    """Group nodeos-named leftovers by the volume or snapshot they belong to; names outside the
    scheme are left out (never touched)."""
    out: dict[str, Orphan] = {}

    def add(key: str, kind: str, uuid: str | None, **more: Any) -> None:
        u = out.get(key) or Orphan(key, kind, None)
        if uuid is not None:
            u = replace(u, uuid=uuid)
        for k, v in more.items():
            u = replace(u, **{k: (*getattr(u, k), v) if isinstance(getattr(u, k), tuple) else v})
        out[key] = u

    for pool_id, vol_id, kind in found.lvs:
        if pool_id not in ready_pools:
            continue
        if (m := _VOL_LV.match(vol_id)) and kind in ("volume", "clone"):
            uuid = _uuid(m.group(1))
            add(f"volume:{m.group(1)[:24]}", "volume", uuid, lvs=(pool_id, vol_id))
        elif (m := _SNAP_LV.match(vol_id)) and kind == "snapshot":
            uuid = _uuid(m.group(1))
            add(f"snapshot:{uuid}", "snapshot", uuid, lvs=(pool_id, vol_id))
    for nqn in found.exports:
        if nqn.startswith(VOLUME_NQN_PREFIX):
            uuid = _parse_uuid(nqn[len(VOLUME_NQN_PREFIX) :])
        elif nqn.startswith(REPLICA_NQN_PREFIX):
            text, _, node = nqn[len(REPLICA_NQN_PREFIX) :].rpartition(":")
            uuid = _parse_uuid(text) if node == str(me) else None
        else:
            continue
        if uuid is not None:
            add(f"volume:{uuid.replace('-', '')[:24]}", "volume", uuid, exports=nqn)
    for mid in found.mirrors:
        if m := _MIRROR.match(mid):
            add(f"volume:{m.group(1)}", "volume", None, mirror=mid)
    for nqn in found.remotes:
        if nqn.startswith(REPLICA_NQN_PREFIX):
            text, _, node = nqn[len(REPLICA_NQN_PREFIX) :].rpartition(":")
            uuid = _parse_uuid(text)
            if uuid is not None and node.isdigit():
                add(f"volume:{uuid.replace('-', '')[:24]}", "volume", uuid, remotes=nqn)
    return out


def _short(uuid: str) -> str:
    return uuid.replace("-", "")[:24]


def volume_busy(st: dict[str, Any], vol: dict[str, Any], me: int) -> str | None:
    """Why a map volume's leftovers on `me` must stay (None: the map is done with `me` there)."""
    if any(s["node"] == me for s in vol["placement"]):
        return "placed on this node"
    if vol["state"] != "ready":
        return f"the volume is {vol['state']}"
    if vol.get("handoff") or vol.get("freeze"):
        return "a handoff or a snapshot freeze is in progress"
    if {int(n) for n in in_sync_of(vol)} != {int(s["node"]) for s in vol["placement"]}:
        return "a replica is being copied"
    if replicas.replicated(vol):
        prim = int(vol["primary"])
        if not replicas.node_up(st, prim):
            return "its primary is down"
        rep = replica_report(st, prim, vol["uuid"])
        if int(rep.get("epoch") or 0) != int(vol["epoch"]):
            return "its primary has not reported at the volume's epoch"
        if any(int(n) == me for n in rep.get("members") or {}):
            return "its primary's mirror still lists this node's leg"
    return None


def kept_because(
    st: dict[str, Any],
    me: int,
    recs: tuple[dict[str, Any], ...],
    u: Orphan,
    recorded: frozenset[str] = frozenset(),
) -> str | None:
    """Why a unit must stay (None: it is an orphan). `recs`: this node's (pools, volumes, snapshots);
    `recorded`: the uuids of its other local records (any kind a later feature keeps)."""
    _, vrecs, srecs = recs
    mine = {str(r.get("uuid") or "") for r in (*vrecs.values(), *srecs.values())} | set(recorded)
    if u.uuid in mine or any(_short(x) == u.key.split(":", 1)[1] for x in mine if x):
        return "recorded on this node"
    if u.uuid in (st.get("published") or {}) or any(
        _short(x) == u.key.split(":", 1)[1] for x in (st.get("published") or {})
    ):
        return "a published volume's"  # its own section, its own agent steps (issue 13)
    if u.kind == "snapshot":
        snap = st["snapshots"].get(u.uuid or "")
        if snap is None:
            return None
        if any(s["node"] == me for s in snap["placement"]):
            return "placed on this node"
        if snap["state"] != "ready":
            return f"the snapshot is {snap['state']}"
        vol = st["volumes"].get(snap.get("volume") or "")
        return None if vol is None else volume_busy(st, vol, me)
    short = u.key.split(":", 1)[1]
    for vol in st["volumes"].values():
        if _short(vol["uuid"]) == short:
            why = volume_busy(st, vol, me)
            if why:
                return why
    return None


def find(
    st: dict[str, Any],
    me: int,
    recs: tuple[dict[str, Any], ...],
    found: Found,
    recorded: frozenset[str] = frozenset(),
) -> tuple[list[Orphan], dict[str, str]]:
    """(the orphans, {key: why kept} of the other nodeos-named units)."""
    ready = {p["pool_id"] for p in recs[0].values() if p.get("state") == "ready"}
    orphans: list[Orphan] = []
    kept: dict[str, str] = {}
    for key, u in sorted(units(found, me, ready).items()):
        why = kept_because(st, me, recs, u, recorded)
        if why is None:
            orphans.append(u)
        else:
            kept[key] = why
    return orphans, kept


@dataclass
class Tracker:
    """Orphans seen in consecutive scans; due once seen for GRACE_S over GRACE_SCANS scans."""

    seen: dict[str, Seen] = field(default_factory=dict)

    def closed(self) -> None:
        self.seen.clear()

    def advance(self, orphans: list[Orphan], now: float, index: int) -> list[Orphan]:
        seen: dict[str, Seen] = {}
        due: list[Orphan] = []
        for u in orphans:
            old = self.seen.get(u.key)
            s = Seen(now, 1, index) if old is None else Seen(old.since, old.scans + 1, old.index)
            seen[u.key] = s
            if s.scans >= GRACE_SCANS and now - s.since >= GRACE_S:
                due.append(u)
        self.seen = seen
        return due
