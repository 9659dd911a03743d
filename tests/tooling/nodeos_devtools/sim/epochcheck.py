"""Failover invariants of the cluster map under simulation: epochs, the in-sync set, hand-overs.

Checked by the simulator after every applied command (mapcheck.py calls these on the first
apply of each entry; every other node must reach the same digest), in both the map and the
failover workloads. Words as the map uses them (nodeos/storage/failover_map.py):

- a node is **down** when the map, as applied after the command, holds `health == "down"` for
  it (`health_of`); absent or "up" is up. A node's Raft member may still answer while the map
  calls it down: what counts is the map's word, the one every decision reads;
- a volume's **epoch** is `volumes[uuid].epoch`; a report or a hand-over is **of an older
  epoch** when the `epoch` (resp. `handed_off`) it carries for the volume is below the
  volume's epoch in the map at the time it is applied or used. (A replicated volume's report
  always carries one: nodeos/agent/report.py. A report without an epoch is taken as current,
  the map's rule for reports of single-replica volumes.)

Invariants (V = a volume in the map both before and after one command):

1. **a down node never joins in-sync**: no node enters `in_sync` of V while it is down; and a
   down node stays in `in_sync` only as V's primary or as its last member (`node_health down`
   drops every other replica of it at once, and nothing re-adds one while it is down);
2. **a change of primary always raises the epoch**: V's primary changes exactly when its
   epoch does, and then by one; the new primary was in `in_sync` before and up, the old one
   is out of `in_sync` after (it may be one write ahead of the others);
3. **reports of an older epoch change nothing in the desired state**: a `node_report` changes
   none of V's placement, primary, epoch, hosts, size or hand-over, and changes `in_sync` only
   from the primary's report at V's epoch: every node it adds is a member that report calls
   `in-sync`, every node it drops one the report calls `failed` or `missing`;
4. **hand-overs of an older epoch change nothing**: the primary moves away from a node the map
   calls up (a planned move: the old primary may still serve) only when that node's report,
   as the map holds it, says `handed_off` at exactly the epoch the move leaves. A hand-over
   confirmed at an older epoch says nothing about the front end the node serves now. A move
   away from a down node is the unplanned failover, whose safety is the lease (not checked
   here: the failover workload's "two writable primaries" is).
"""

from __future__ import annotations

from typing import Any

from nodeos.storage.failover_map import MEMBER_OUT, in_sync_of
from nodeos.storage.lookup import health_of

from .invariants import Violation

NO_REPORT_CHANGES = ("placement", "primary", "epoch", "hosts", "size_bytes", "handoff")


def _fail(what: str) -> None:
    raise Violation("failover map invariant", what)


def _replica_report(st: dict[str, Any], nid: int, uuid: str) -> dict[str, Any]:
    return ((st["reports"].get(nid) or {}).get("replicas") or {}).get(uuid) or {}


def check_state(st: dict[str, Any]) -> None:
    """Invariant 1, on one state: a down node is in `in_sync` only as primary or last member."""
    for vol in st["volumes"].values():
        cur = in_sync_of(vol)
        for nid in cur:
            if health_of(st, nid) == "down" and nid != vol["primary"] and len(cur) > 1:
                _fail(f"volume {vol['name']!r}: node {nid} is down but in the in-sync set {cur}")


def check_transition(old: dict[str, Any], st: dict[str, Any], cmd: str | None) -> None:
    """Invariants 1-4 across one command (`old`: mapcheck.before() of the state it applied to)."""
    for uuid, was in old["volumes"].items():
        vol = st["volumes"].get(uuid)
        if vol is None:
            continue
        name = vol["name"]
        before, after = in_sync_of(was), in_sync_of(vol)
        joined = [n for n in after if n not in before]
        for nid in joined:
            if health_of(st, nid) == "down":
                _fail(
                    f"volume {name!r}: node {nid}, down, joined the in-sync set "
                    f"({before} -> {after}) by {cmd}"
                )
        _check_primary_move(st, was, vol, before, after)
        if cmd == "node_report":
            _check_report(st, was, vol, before, after)


def _check_primary_move(
    st: dict[str, Any], was: dict[str, Any], vol: dict[str, Any], before: list[int], after: list[int]
) -> None:
    name, old_p, new_p = vol["name"], was["primary"], vol["primary"]
    moved, bumped = new_p != old_p, vol["epoch"] != was["epoch"]
    if moved != bumped or (bumped and vol["epoch"] != was["epoch"] + 1):
        _fail(
            f"volume {name!r}: primary {old_p} -> {new_p} with epoch {was['epoch']} -> {vol['epoch']} "
            "(a change of primary raises the epoch by one, and nothing else does)"
        )
    if not moved:
        return
    if was["state"] == "creating":
        # A new volume holds no data: its primary's slot moves off a node that failed to make
        # its replica to one outside the set (create_replace_map.py), and only then.
        failed = {int(f["node"]) for f in vol.get("create_failed") or ()}
        if old_p not in failed or any(s["node"] == old_p for s in vol["placement"]):
            _fail(f"volume {name!r}: new volume's primary {old_p} -> {new_p}, {old_p} never failed it")
        return
    if new_p not in before or health_of(st, new_p) == "down":
        _fail(
            f"volume {name!r}: node {new_p} promoted from the in-sync set {before} "
            f"(health {health_of(st, new_p)})"
        )
    if old_p in after:
        _fail(f"volume {name!r}: the old primary {old_p} stayed in the in-sync set {after} after the move")
    if health_of(st, old_p) != "down":
        said = _replica_report(st, old_p, vol["uuid"]).get("handed_off")
        if said != was["epoch"]:
            _fail(
                f"volume {name!r}: primary moved off node {old_p}, which is up, at epoch {was['epoch']} "
                f"with its report saying handed_off {said!r}"
            )


def _check_report(
    st: dict[str, Any], was: dict[str, Any], vol: dict[str, Any], before: list[int], after: list[int]
) -> None:
    name = vol["name"]
    changed = [k for k in NO_REPORT_CHANGES if vol.get(k) != was.get(k)]
    if changed:
        _fail(f"a node report changed volume {name!r}'s {changed}")
    if before == after:
        return
    rep = _replica_report(st, vol["primary"], vol["uuid"])
    epoch = rep.get("epoch", vol["epoch"])
    members = rep.get("members") or {}
    if epoch != vol["epoch"]:
        _fail(
            f"volume {name!r}: in-sync set {before} -> {after} at epoch {vol['epoch']} from primary "
            f"{vol['primary']}'s report of epoch {epoch}"
        )
    for nid in after:
        if nid not in before and members.get(nid) != "in-sync":
            _fail(
                f"volume {name!r}: node {nid} joined the in-sync set; "
                f"the primary's report calls it {members.get(nid)!r}"
            )
    for nid in before:
        if nid not in after and members.get(nid) not in MEMBER_OUT:
            _fail(
                f"volume {name!r}: node {nid} left the in-sync set; "
                f"the primary's report calls it {members.get(nid)!r}"
            )
