"""State-machine checks of the cluster map under simulation (the "map" workload).

Every simulated node applies the committed entries to its own `ClusterMap`. Checked:
- same state: the canonical digest of every node's map at an applied index is the same
  (dict order does not count; the content does), also right after a node installs a
  snapshot or restarts from one;
- snapshot round trip: restoring the map's own snapshot gives the same digest;
- map invariants after every apply (`check_state`), from what map.py, storage_map.py and
  docs/cluster.md promise: one name space (every name points to exactly one live volume or
  snapshot of that name, and every volume and snapshot is named); placement of 1-3 replicas
  on distinct member nodes and existing pools of those nodes; path states on exactly the
  replica nodes, the primary optimized; grants only to registered hosts; known states only;
  failure domains exactly those of the members; at most 64 rejections kept;
- transitions (`check_transition`, the state before and after one command): applied index
  grows by the entry; epochs and report seqs never go back; a report never changes desired
  state (placement, primary, epoch, grants, size); a volume turns ready only when every
  replica is in-sync; a volume leaves the map only from deleting once no replica node
  that is up reports it; a new volume's replicas sit in distinct failure domains at its spread level
  (labels as applied), a clone on its ready snapshot's nodes, and no pool holds more than its
  size of volumes under the simulator's thick accounting (`_check_pool_room`); a snapshot turns ready only
  when every replica node reports it ready and, for a replicated volume, while its primary
  reports the writes frozen for it; a volume's freeze and its snapshot's phase go together;
- the failover invariants (epochs, the in-sync set, hand-overs): epochcheck.py;
- typed commands (`typed`): no committed command's arguments break its typed record.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import msgpack

from nodeos.cluster.map import MAX_REJECTED
from nodeos.storage import capacity, placement, pool_index
from nodeos.storage.storage_map import VOLUME_STATES, replica_view

from . import epochcheck
from .invariants import Violation

POOL_STATES = ("creating", "ready", "deleting", "failed")
SNAPSHOT_STATES = ("creating", "ready", "deleting")
DESIRED = ("placement", "primary", "epoch", "hosts", "size_bytes", "name", "spread", "kind")


def _canonical(obj: Any) -> Any:
    if isinstance(obj, dict):
        return [[_canonical(k), _canonical(v)] for k, v in sorted(obj.items(), key=lambda kv: repr(kv[0]))]
    if isinstance(obj, (list, tuple)):
        return [_canonical(x) for x in obj]
    return obj


def digest(st: dict[str, Any]) -> str:
    """The map's content, independent of the order its dicts were filled in."""
    try:
        # The fast path (C): sorted keys; bytes and other non-JSON values by their repr.
        # (the map is a tree of plain values: no cycles to look for)
        data = json.dumps(st, sort_keys=True, default=repr, check_circular=False).encode()
    except TypeError:  # a dict with keys of mixed types does not sort
        data = msgpack.packb(_canonical(st), use_bin_type=True)
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass
class _Seen:
    """The first state seen at an applied index: its msgpack bytes (None when it does not pack)
    and its digest, computed only once a state that packs differently has to be compared."""

    nid: int
    packed: bytes | None
    digest: str | None = None

    def the_digest(self) -> str:
        if self.digest is None:
            assert self.packed is not None
            self.digest = digest(msgpack.unpackb(self.packed, raw=False, strict_map_key=False))
        return self.digest


def _pack(st: dict[str, Any]) -> bytes | None:
    try:
        return msgpack.packb(st, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return None


def _fail(what: str) -> None:
    raise Violation("map invariant", what)


def check_state(st: dict[str, Any]) -> None:
    names, vols, snaps = st["names"], st["volumes"], st["snapshots"]
    pubs = st.get("published") or {}
    for name, ref in names.items():
        objs = {"volume": vols, "snapshot": snaps, "published": pubs}.get(ref["kind"], {})
        obj = objs.get(ref["uuid"])
        if obj is None or obj["name"] != name:
            _fail(f"name {name!r} points to {ref['kind']} {ref['uuid']} which is not there under that name")
    for kind, objs in (("volume", vols), ("snapshot", snaps)):
        for uuid, obj in objs.items():
            if names.get(obj["name"]) != {"kind": kind, "uuid": uuid}:
                _fail(f"{kind} {obj['name']!r} ({uuid}) is not named in the name space")
            _check_slots(st, kind, obj)
    for uuid, vol in vols.items():
        if vol["state"] not in VOLUME_STATES:
            _fail(f"volume {vol['name']!r} has state {vol['state']!r}")
        want = {s["node"] for s in vol["placement"]}
        paths = st["paths"].get(uuid) or {}
        optimized = [n for n, a in paths.items() if a == "optimized"]
        if set(paths) != want or optimized != [vol["primary"]]:
            _fail(
                f"volume {vol['name']!r}: paths {paths} for replicas on {sorted(want)}, "
                f"primary {vol['primary']}"
            )
        stray = [h for h in vol["hosts"] if h not in st["hosts"]]
        if stray or len(set(vol["hosts"])) != len(vol["hosts"]):
            _fail(f"volume {vol['name']!r} is granted to {vol['hosts']}; registered: {sorted(st['hosts'])}")
    if set(st["paths"]) - set(vols) - set(pubs):
        _fail(f"paths of volumes not in the map: {sorted(set(st['paths']) - set(vols) - set(pubs))}")
    for uuid, pub in pubs.items():
        if names.get(pub["name"]) != {"kind": "published", "uuid": uuid}:
            _fail(f"published volume {pub['name']!r} ({uuid}) is not named in the name space")
        check_published(st, pub)
    for snap in snaps.values():
        if snap["state"] not in SNAPSHOT_STATES:
            _fail(f"snapshot {snap['name']!r} has state {snap['state']!r}")
        if snap.get("phase") is not None:
            vol = vols.get(snap["volume"])
            if snap["state"] != "creating" or vol is None or vol.get("freeze") != snap["uuid"]:
                _fail(f"snapshot {snap['name']!r} in phase {snap['phase']} without its volume's freeze")
    for vol in vols.values():
        snap = snaps.get(vol.get("freeze") or "")
        if vol.get("freeze") and (snap is None or snap.get("phase") is None or snap["volume"] != vol["uuid"]):
            _fail(
                f"volume {vol['name']!r} is frozen for {vol['freeze']}, "
                "which is not a snapshot being taken of it"
            )
    for key, pool in st["pools"].items():
        if pool["state"] not in POOL_STATES or pool["node"] not in st["nodes"]:
            _fail(f"pool {key} is {pool['state']!r} on node {pool['node']}")
    domains = {n["failure_domain"] for n in st["nodes"].values()}
    if domains != set(st["failure_domains"]):
        _fail(f"failure domains {sorted(st['failure_domains'])}, members' domains {sorted(domains)}")
    if len(st["rejected"]) > MAX_REJECTED:
        _fail(f"{len(st['rejected'])} rejections kept, at most {MAX_REJECTED}")


def check_published(st: dict[str, Any], pub: dict[str, Any]) -> None:
    """A published volume (issue 13): only replicas holding the source's bytes, on a node not
    down, serve, every path optimized; copies come only from such replicas, up, none feeding
    more than its share."""
    from nodeos.storage.lookup import health_of
    from nodeos.storage.publish import DEFAULT_FANOUT, joined

    name, order = pub["name"], [s["node"] for s in pub["placement"]]
    if pub["state"] not in ("publishing", "ready", "unpublishing"):
        _fail(f"published volume {name!r} has state {pub['state']!r}")
    if len(set(order)) != len(order) or order[0] != pub["source"] or not pub["placement"][0]["seed"]:
        _fail(f"published volume {name!r}: placement {pub['placement']}, source {pub['source']}")
    reps = {n: ((st["reports"].get(n) or {}).get("published") or {}).get(pub["uuid"]) for n in order}
    serving = {n for n in order if joined(pub["checksum"], reps[n]) and health_of(st, n) != "down"}
    paths = st["paths"].get(pub["uuid"]) or {}
    if pub["state"] == "unpublishing":
        if paths:
            _fail(f"published volume {name!r} is being removed but still has paths {paths}")
        return
    if set(paths) != serving or any(a != "optimized" for a in paths.values()):
        _fail(f"published volume {name!r}: paths {paths}, replicas holding its bytes {sorted(serving)}")
    if pub["state"] == "ready" and pub["checksum"] is None:
        _fail(f"published volume {name!r} is ready without a checksum")
    load: dict[int, int] = {}
    seeds = {s["node"] for s in pub["placement"] if s["seed"]}
    for t, src in (pub.get("copy_from") or {}).items():
        load[src] = load.get(src, 0) + 1
        if t not in order or t in seeds or t in serving or src not in serving or health_of(st, src) != "up":
            _fail(f"published volume {name!r}: node {t} copies from {src}; serving {sorted(serving)}")
    if load and max(load.values()) > DEFAULT_FANOUT:
        _fail(f"published volume {name!r}: copy sources feed {load}, at most {DEFAULT_FANOUT} each")
    stray = [h for h in pub["hosts"] if h not in st["hosts"]]
    if stray:
        _fail(f"published volume {name!r} is granted to unregistered hosts {stray}")


def _check_slots(st: dict[str, Any], kind: str, obj: dict[str, Any]) -> None:
    slots = obj["placement"]
    nodes = [s["node"] for s in slots]
    if not 1 <= len(slots) <= 3 or len(set(nodes)) != len(nodes):
        _fail(f"{kind} {obj['name']!r} has placement {slots}")
    pools = {(p["node"], p["pool_id"]) for p in st["pools"].values()}
    for s in slots:
        if s["node"] not in st["nodes"] or (s["node"], s["pool_id"]) not in pools:
            _fail(f"{kind} {obj['name']!r} has a replica on node {s['node']} pool {s['pool_id']}: not there")


def _copy(obj: Any) -> Any:
    """A deep copy of a tree of dicts and lists (the map's values), without deepcopy's memo:
    several times faster, and the simulator takes one at every first apply of an entry."""
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bytes)):
        return obj
    return copy.deepcopy(obj)


def before(st: dict[str, Any]) -> dict[str, Any]:
    """What check_transition compares against (a copy of the parts that may change)."""
    return {
        "applied_index": st["applied_index"],
        "volumes": _copy(st["volumes"]),
        "snapshots": {u: s["state"] for u, s in st["snapshots"].items()},
        "seqs": {n: r.get("seq", 0) for n, r in st["reports"].items()},
        "requests": dict(st.get("requests", {})),  # request id -> its record (the same objects)
        "rejected": len(st["rejected"]),
    }


def check_transition(
    old: dict[str, Any], st: dict[str, Any], index: int, cmd: str | None, rid: str | None = None
) -> None:
    if st["applied_index"] != index or old["applied_index"] >= index:
        _fail(f"applied index went {old['applied_index']} -> {st['applied_index']} applying entry {index}")
    if rid is not None and rid in old["requests"]:
        # A console's repeat of a request applied before: answered from the record, nothing changes.
        same = st["requests"].get(rid) is old["requests"][rid] and len(st["rejected"]) == old["rejected"]
        if not same or st["volumes"] != old["volumes"]:
            first = old["requests"][rid]["index"]
            _fail(f"{cmd} request {rid} was applied again at entry {index} (first at {first})")
    for nid, seq in old["seqs"].items():
        if nid in st["reports"] and st["reports"][nid].get("seq", 0) < seq:
            _fail(f"node {nid}'s report seq went back from {seq}")
    for uuid, was in old["volumes"].items():
        vol = st["volumes"].get(uuid)
        if vol is None:
            # A node that is down is not waited for (nodeos/storage/delete_map.py).
            held = [
                n
                for n in sorted({s["node"] for s in was["placement"]})
                if _reports(st, n, uuid) and (st["nodes"].get(n) or {}).get("health", "up") != "down"
            ]
            # A delete drops at once a volume no node reports (never created anywhere).
            if (was["state"] != "deleting" and cmd != "volume_delete") or held:
                _fail(f"volume {was['name']!r} left the map while {was['state']}, still on nodes {held}")
            continue
        if vol["epoch"] < was["epoch"]:
            _fail(f"volume {vol['name']!r}: epoch went back {was['epoch']} -> {vol['epoch']}")
        if cmd == "node_report" and any(vol[k] != was[k] for k in DESIRED):
            changed = [k for k in DESIRED if vol[k] != was[k]]
            _fail(f"a node report changed volume {vol['name']!r}'s desired {changed}")
        if vol["state"] != was["state"]:
            _check_volume_step(st, was, vol)
        if vol["placement"] != was["placement"] and was["state"] == "creating":
            _check_create_replaced(st, was, vol)
    for uuid, vol in st["volumes"].items():
        if uuid not in old["volumes"]:
            _check_new_volume(st, vol)
    for uuid, snap in st["snapshots"].items():
        if snap["state"] == "ready" and old["snapshots"].get(uuid) != "ready":
            _check_snapshot_ready(st, snap)


def _check_snapshot_ready(st: dict[str, Any], snap: dict[str, Any]) -> None:
    """Ready only once every replica node has it, and for a replicated volume only while its
    primary holds the writes for it (one point of the write stream on every leg)."""
    have = {
        s["node"]: ((st["reports"].get(s["node"]) or {}).get("snapshots") or {}).get(snap["uuid"])
        for s in snap["placement"]
    }
    if any((v or {}).get("state") != "ready" for v in have.values()):
        _fail(f"snapshot {snap['name']!r} turned ready with replica snapshots {have}")
    if len(snap["placement"]) > 1:
        prim = ((st["reports"].get(snap["primary"]) or {}).get("replicas") or {}).get(snap["volume"]) or {}
        if prim.get("frozen") != snap["uuid"]:
            _fail(
                f"snapshot {snap['name']!r} of a replicated volume turned ready without the primary's freeze"
            )


def _reports(st: dict[str, Any], nid: int, uuid: str) -> bool:
    return uuid in ((st["reports"].get(nid) or {}).get("replicas") or {})


def _check_volume_step(st: dict[str, Any], was: dict[str, Any], vol: dict[str, Any]) -> None:
    allowed = {
        "creating": ("ready", "failed", "deleting"),
        "ready": ("deleting",),
        "failed": ("deleting",),
        "deleting": (),
    }
    if vol["state"] not in allowed[was["state"]]:
        _fail(f"volume {vol['name']!r} went {was['state']} -> {vol['state']}")
    if vol["state"] == "ready":
        views = {s["node"]: replica_view(st, vol, s["node"])["state"] for s in vol["placement"]}
        if any(v != "in-sync" for v in views.values()):
            _fail(f"volume {vol['name']!r} turned ready with replicas {views}")


def _check_create_replaced(st: dict[str, Any], was: dict[str, Any], vol: dict[str, Any]) -> None:
    """A new volume's slot moves only off a node that failed to make it, never onto one that
    did, one slot at a time, and the placement still spreads (create_replace_map.py)."""
    failed = {int(f["node"]) for f in vol.get("create_failed") or ()}
    pairs = zip(was["placement"], vol["placement"], strict=True)
    moved = [(a["node"], b["node"]) for a, b in pairs if a != b]
    if len(moved) != 1 or moved[0][0] not in failed or moved[0][1] in failed:
        why = f"nodes that failed it: {sorted(failed)}"
        _fail(f"volume {vol['name']!r} re-placed {moved} while creating; {why}")
    if was["primary"] == moved[0][0] and (vol["primary"] != moved[0][1] or vol["epoch"] <= was["epoch"]):
        _fail(f"volume {vol['name']!r}: its primary's slot moved without the primary and a new epoch")
    _check_spread_of(st, vol)
    _check_pool_room(st, vol)


def _check_new_volume(st: dict[str, Any], vol: dict[str, Any]) -> None:
    if vol["state"] == "ready":
        _check_volume_step(st, {**vol, "state": "creating"}, vol)
    if vol["kind"] == "clone":
        snap = st["snapshots"].get(vol["origin_uuid"])
        nodes = {s["node"] for s in (snap or {}).get("placement", [])}
        if snap is None or snap["state"] != "ready" or not {s["node"] for s in vol["placement"]} <= nodes:
            _fail(f"clone {vol['name']!r} of {vol['origin']!r} is not on its ready snapshot's nodes")
        return
    _check_pool_room(st, vol)
    _check_spread_of(st, vol)


def _check_spread_of(st: dict[str, Any], vol: dict[str, Any]) -> None:
    spread = vol["spread"]
    domains = []
    for s in vol["placement"]:
        n = st["nodes"][s["node"]]
        cand = placement.NodeCandidate(s["node"], str(n.get("name")), dict(n.get("labels") or {}), True)
        domains.append(placement.domain_of(cand, spread))
    if len(set(domains)) != len(domains):
        _fail(f"volume {vol['name']!r} has two replicas in one {spread} domain: {domains}")


def _check_pool_room(st: dict[str, Any], vol: dict[str, Any]) -> None:
    """Thick accounting holds under the simulator's agent, which reports a pool's free space
    as its size less every volume (and clone) placed on it in its view of the map: a new volume
    never brings a pool's volumes that are neither deleting nor clones above the pool's size,
    however many creates were decided against one map (capacity.py re-checks at apply)."""
    for s in vol["placement"]:
        have = ((st["reports"].get(s["node"]) or {}).get("pools") or {}).get(s["pool_id"]) or {}
        if "size_bytes" not in have:
            continue
        on = [
            v
            for v in st["volumes"].values()
            if v["kind"] != "clone"
            and v["state"] != "deleting"
            and any((x["node"], x["pool_id"]) == (s["node"], s["pool_id"]) for x in v["placement"])
        ]
        total = sum(int(v["size_bytes"]) for v in on)
        if total > int(have["size_bytes"]):
            _fail(
                f"volume {vol['name']!r} overcommits pool {s['pool_id']} of node {s['node']}: "
                f"{total} bytes of volumes ({', '.join(sorted(v['name'] for v in on))}) "
                f"in {have['size_bytes']}"
            )


class MapChecker:
    """Digests by applied index across nodes, and the checks above on each index's first apply."""

    def __init__(self) -> None:
        self.seen: dict[int, _Seen] = {}  # applied index -> the first node's state there
        self.stats = {
            "map_applied": 0,
            "map_rejected": 0,
            "map_snapshot_checks": 0,
            "map_restores": 0,
            "volumes_ready": 0,
            "volumes_failed": 0,
            "creates_replaced": 0,
            "volumes_dropped": 0,
            "replicated_ready": 0,
            "snapshots_ready": 0,
            "replicated_snapshots_ready": 0,
            "clones": 0,
            "grants": 0,
        }

    def first_apply(self, index: int) -> bool:
        """True when no node applied `index` yet: the full checks run on this apply only (the
        others must reach the same digest, so they pass or fail the same way)."""
        return index not in self.seen

    def applied(
        self,
        nid: int,
        index: int,
        st: dict[str, Any],
        old: dict[str, Any] | None,
        cmd: str | None,
        result: dict[str, Any],
        rid: str | None = None,
    ) -> None:
        if old is not None:
            self.stats["map_applied"] += 1
            self.stats["map_rejected"] += "error" in result
            check_state(st)
            check_transition(old, st, index, cmd, rid)
            epochcheck.check_state(st)
            epochcheck.check_transition(old, st, cmd)
            self._count(old, st)
        self.same_state(nid, index, st, "applying")

    def typed(self, nid: int, index: int, cmap: Any) -> None:
        """Every committed command's arguments fit its typed record (nodeos/cluster/command_args.py):
        the map only observes it at apply, so a proposer that skipped the check shows here."""
        if cmap.nonconforming:
            bad = cmap.nonconforming[-1]
            raise Violation(
                "map invariant",
                f"node {nid} applied {bad['cmd']} v{bad['v']} at index {bad['index']} "
                f"(by {index}) with arguments its record refuses: {bad['why']}",
            )

    def pool_index(self, nid: int, index: int, cmap: Any) -> None:
        """A node's pool index (nodeos/storage/pool_index.py, what its applied creates check
        room with) finds, pool by pool, what a scan of every volume finds."""
        st = cmap.state
        for p in st["pools"].values():
            ref = (p["node"], p["pool_id"])
            scan = capacity.pending_bytes(st, [ref])
            token = pool_index.ACTIVE.set((st, cmap.pool_index))
            try:
                via = capacity.pending_bytes(st, [ref])
            finally:
                pool_index.ACTIVE.reset(token)
            if via != scan:
                raise Violation(
                    "map invariant",
                    f"node {nid}'s pool index after index {index} counts {via} pending on pool {ref}, "
                    f"a scan of every volume {scan}",
                )
        scan = capacity.pending_bytes(st)  # every pool at once: what the leader's placement nets out
        with pool_index.using(st, cmap.pool_index):
            via = capacity.pending_bytes(st)
        if via != scan:
            raise Violation(
                "map invariant",
                f"node {nid}'s index of unlisted volumes after index {index} counts {via} pending, "
                f"a scan of every volume {scan}",
            )

    def _count(self, old: dict[str, Any], st: dict[str, Any]) -> None:
        """What the run exercised (the tests check a run did reach these)."""
        s, was = self.stats, old["volumes"]
        for uuid, vol in st["volumes"].items():
            prev = was.get(uuid)
            if vol["state"] != (prev or {}).get("state") and vol["state"] in ("ready", "failed"):
                s["volumes_" + vol["state"]] += 1
                s["replicated_ready"] += vol["state"] == "ready" and vol["replicas"] > 1
            s["creates_replaced"] += (
                prev is not None and prev["placement"] != vol["placement"] and vol["state"] == "creating"
            )
            s["clones"] += prev is None and vol["kind"] == "clone"
            s["grants"] += prev is not None and len(vol["hosts"]) > len(prev["hosts"])
        s["volumes_dropped"] += len(set(was) - set(st["volumes"]))
        for u, x in st["snapshots"].items():
            if x["state"] == "ready" and old["snapshots"].get(u) != "ready":
                s["snapshots_ready"] += 1
                s["replicated_snapshots_ready"] += len(x["placement"]) > 1

    def same_state(self, nid: int, index: int, st: dict[str, Any], how: str) -> None:
        """The digest of `st` is the one of the first state seen at `index`. (Equal msgpack bytes
        mean equal digests: msgpack keeps every type and order that the digest's JSON does, and
        more, so the digests are computed only for states that pack differently, e.g. the same
        content in another dict order; the verdict is the digests'.)"""
        self.stats["map_restores"] += how != "applying"
        packed = _pack(st)
        prev = self.seen.get(index)
        if prev is None:
            self.seen[index] = _Seen(nid, packed, None if packed is not None else digest(st))
            return
        if packed is not None and packed == prev.packed:
            return
        d, first = digest(st), prev.the_digest()
        if first != d:
            raise Violation(
                "map divergence",
                f"node {nid}'s map after {how} index {index} has digest {d}, node {prev.nid}'s {first}",
            )

    def snapshot_round_trip(self, nid: int, snapshot: bytes, st: dict[str, Any]) -> None:
        from nodeos.cluster.map import ClusterMap

        m = ClusterMap()
        m.restore(snapshot)
        self.stats["map_snapshot_checks"] += 1
        if m.state != st and digest(m.state) != digest(st):
            diff = sorted(k for k in st if m.state.get(k) != st[k])
            raise Violation("map snapshot", f"node {nid}'s map restored from its snapshot differs in {diff}")
